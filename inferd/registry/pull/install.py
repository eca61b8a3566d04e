"""Put verified downloads in place: a model folder in the Antfly layout with a
`model_manifest.json` that says where it came from (`source`: repo, revision, and every
file with its size and sha256), so discovery serves it and `inferd models` shows it.

The folder is assembled under `.downloads/` and renamed into place in one step, so a
server (re)starting mid-install sees the old folder or the new one, never half of it."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from inferd.errors import InvalidInput
from inferd.registry.discovery import MANIFEST
from inferd.registry.pull.transfer import DOWNLOADS, file_sha256


def _inside(root: Path, rel: str) -> Path:
    p = (root / rel).resolve()
    if not p.is_relative_to(root.resolve()) or p == root.resolve():
        raise InvalidInput(f"refusing a path outside the models folder: {rel!r}")
    return p


def install(models_dir: Path, folder: str, files: dict[str, Path], manifest: dict[str, Any],
            texts: dict[str, str] | None = None) -> Path:
    """Link (or, across filesystems, copy) `files` (destination path in the folder -> verified
    blob) into `<models_dir>/<folder>/`, with the manifest (its `source.files` filled in
    here). The caller lets go of the blobs afterwards (Transfers.release)."""
    models_dir = Path(models_dir)
    final = _inside(models_dir, folder)
    stage = models_dir / DOWNLOADS / f"stage-{secrets.token_hex(6)}"
    stage.mkdir(parents=True)
    try:
        listed = []
        for dest, blob in files.items():
            target = _inside(stage, dest)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(blob, target)
            except OSError:
                shutil.copyfile(blob, target)
            listed.append({"path": dest, "size": target.stat().st_size, "sha256": _sha_of(blob)})
        for dest, text in (texts or {}).items():
            _inside(stage, dest).write_text(text)
        src = dict(manifest.get("source") or {})
        src["files"] = listed
        manifest = {**manifest, "source": src}
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        final.parent.mkdir(parents=True, exist_ok=True)
        old = None
        if final.exists():
            old = models_dir / DOWNLOADS / f"old-{secrets.token_hex(6)}"
            os.replace(final, old)
        os.replace(stage, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return final


def _sha_of(blob: Path) -> str:
    name = blob.name
    return name[len("sha256-"):] if name.startswith("sha256-") else file_sha256(blob)


def remove_folder(models_dir: Path, folder: Path) -> None:
    """Delete a model folder (moved aside first, so it vanishes from discovery at once)."""
    models_dir = Path(models_dir)
    trash = models_dir / DOWNLOADS / f"old-{secrets.token_hex(6)}"
    trash.parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)
    parent = folder.parent   # prune empty org/repo folders left behind
    while parent != models_dir and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
