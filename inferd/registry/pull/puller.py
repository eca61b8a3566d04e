"""One pull, start to end: resolve the reference, plan the files, check disk space, fetch
each file through the shared Transfers (resume, verify), install the folder, report
progress as Ollama-style events:

    {"status": "pulling manifest"}
    {"status": "pulling <digest 12>", "digest": "sha256:...", "total": N, "completed": M, "file": ...}
    {"status": "verifying sha256 digest"}
    {"status": "writing manifest"}
    {"status": "success"}

Blocking; the service runs it on a worker thread."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.errors import InvalidInput, UpstreamFailed
from inferd.net.policy import FetchPolicy
from inferd.registry.discovery import MANIFEST
from inferd.registry.gguf_meta import NotGGUF, check_gguf
from inferd.registry.pull import gotemplate
from inferd.registry.pull.hub import Hub, Plan
from inferd.registry.pull.install import install
from inferd.registry.pull.names import OllamaRef, is_hub_name, parse_hub, parse_ollama
from inferd.registry.pull.ollama import LAYER_FILES, MT, Registry, read_params
from inferd.registry.pull.quants import Chooser
from inferd.registry.pull.transfer import Transfers
from inferd.models import ModelKind

log = logging.getLogger("inferd.pull")
Event = Callable[[dict[str, Any]], None]


@dataclass
class Pulled:
    name: str          # the served name
    path: Path         # the model folder
    kind: ModelKind
    fetched_bytes: int = 0


def _installed(final: Path, revision: str, dests: list[str]) -> bool:
    """Is this exact download already in place (same revision, every file present)?"""
    try:
        m = json.loads((final / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    src = m.get("source") or {}
    have = {f["path"]: f["size"] for f in src.get("files") or []}
    return (src.get("revision") == revision and sorted(have) == sorted(dests)
            and all((final / p).is_file() and (final / p).stat().st_size == n for p, n in have.items()))


def check_files(blobs: dict[str, Path], name: str) -> None:
    """What a pull installs must be what its runtime reads: a GGUF with a sane header
    (gguf_meta.check_gguf), an ONNX graph that is a protobuf ModelProto (field 1, ir_version,
    first). Checked after the digests, before install: garbage from a registry is its 502
    now, never a 500 at the model's first use."""
    for dest, path in blobs.items():
        try:
            if dest.endswith(".gguf"):
                check_gguf(path)
            elif dest.endswith(".onnx"):
                with open(path, "rb") as f:
                    if f.read(1) != b"\x08":
                        raise UpstreamFailed(f"{dest} of '{name}' is not an ONNX model (no ModelProto header)")
        except NotGGUF as e:
            raise UpstreamFailed(f"{dest} of '{name}' is not a usable model file: {e}") from e


def _manifest_digest(doc: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class Puller:
    def __init__(self, models_dir: Path, *, reserve_bytes: int = 0, prefer_quantized: bool = True,
                 hub: Hub | None = None, ollama_registry: str = "https://registry.ollama.ai",
                 policy: FetchPolicy | None = None, verify_files: bool = True):
        """`policy`: the hosts a pull named by a client may reach (the server's; None for the
        operator's own `inferd pull`, which may reach any host). `verify_files`: check each
        model file's header before install (off only for tests of planning on placeholder bytes)."""
        self.models_dir = Path(models_dir)
        self.policy = policy
        self.verify_files = verify_files
        self.transfers = Transfers.of(self.models_dir, reserve_bytes)
        self.prefer_quantized = prefer_quantized
        self._hub = hub
        self.ollama_url = ollama_registry

    @property
    def hub(self) -> Hub:
        if self._hub is None:
            self._hub = Hub()
        return self._hub

    def pull(self, name: str, *, kind: ModelKind | None = None, choose: Chooser | None = None,
             on_event: Event | None = None, cancel: threading.Event | None = None,
             insecure: bool = False, repo_ids_are_hub: bool = True) -> Pulled:
        """`hf.co/...` names go to the Hub, and so do `org/repo[:X]` ones when
        `repo_ids_are_hub` (the CLI; Ollama's API means its own `namespace/model`); the rest
        to an Ollama registry."""
        if is_hub_name(name) or (repo_ids_are_hub and name.count("/") == 1):
            return self.pull_hub(name, kind=kind, choose=choose, on_event=on_event, cancel=cancel)
        return self.pull_ollama(name, on_event=on_event, cancel=cancel, insecure=insecure)

    # ---- Hugging Face Hub ---------------------------------------------------------------------
    def plan_hub(self, name: str, kind: ModelKind | None = None, choose: Chooser | None = None,
                 revision: str | None = None) -> Plan:
        try:
            ref = parse_hub(name)
        except ValueError as e:
            raise InvalidInput(str(e), "model") from e
        listing = self.hub.listing(ref.repo, revision)
        return self.hub.plan(listing, ref.selector, kind, choose, self.prefer_quantized)

    def pull_hub(self, name: str, *, kind: ModelKind | None = None, choose: Chooser | None = None,
                 on_event: Event | None = None, cancel: threading.Event | None = None,
                 revision: str | None = None) -> Pulled:
        emit = on_event or (lambda e: None)
        emit({"status": "pulling manifest"})
        plan = self.plan_hub(name, kind, choose, revision)
        final = self.models_dir / plan.folder
        dests = [plan.dest(f) for f in plan.files]
        with self.transfers.folder_lock(plan.folder):
            if _installed(final, plan.commit, dests):
                for f in plan.files:
                    emit(self._progress(plan.remote(f).key.replace("-", ":", 1), f.size or 0, f.size or 0,
                                        plan.dest(f)))
                emit({"status": "verifying sha256 digest"})
                emit({"status": "success"})
                return Pulled(plan.served_name, final, plan.kind)
            remotes = [plan.remote(f) for f in plan.files]
            self._reuse_installed(final, plan, remotes)
            self.transfers.check_space(remotes)
            # For progress displays only (no "status": the Ollama wire skips it).
            emit({"plan": {"label": plan.label, "repo": plan.repo, "total": sum(f.size or 0 for f in plan.files),
                           "files": [{"path": f.path, "size": f.size, "digest": r.key.replace("-", ":", 1)}
                                     for f, r in zip(plan.files, remotes)]}})
            blobs, fetched, held, installed = {}, 0, [], False
            try:
                for f, r in zip(plan.files, remotes):
                    before = self.transfers.have(r)
                    digest = r.key.replace("-", ":", 1)
                    cb = lambda done, total, d=digest, dest=plan.dest(f): emit(self._progress(d, total, done, dest))  # noqa: E731
                    blobs[plan.dest(f)] = self.transfers.get(r, self.hub.fetcher(plan, f), cb, cancel)
                    held.append(r)
                    fetched += max(0, (f.size or 0) - before)
                emit({"status": "verifying sha256 digest"})
                if self.verify_files:
                    check_files(blobs, plan.served_name)
                emit({"status": "writing manifest"})
                path = install(self.models_dir, plan.folder, blobs, self._hub_manifest(plan))
                installed = True
            finally:
                for r in held:
                    self.transfers.release(r, drop=installed)
        emit({"status": "success"})
        log.info("pulled %s into %s (%d bytes fetched)", plan.served_name, path, fetched)
        return Pulled(plan.served_name, path, plan.kind, fetched)

    def _hub_manifest(self, plan: Plan) -> dict[str, Any]:
        manifest: dict[str, Any] = {
            "name": plan.served_name, "type": plan.kind.value, "format": plan.format,
            "origin": f"hf.co/{plan.repo}@{plan.commit[:12]}",
            "source": {"hub": self.hub.endpoint, "repo": plan.repo, "revision": plan.commit,
                       "quantization": plan.label}}
        if plan.label:
            manifest["quantization"] = plan.label
        return manifest

    def _reuse_installed(self, final: Path, plan: Plan, remotes: list) -> None:
        """A new revision of a model already here: files whose sha256 did not change are
        linked from the installed folder instead of fetched again."""
        try:
            old = {f["path"]: f.get("sha256") for f in json.loads((final / MANIFEST).read_text())["source"]["files"]}
        except (OSError, ValueError, KeyError, TypeError):
            return
        for f, r in zip(plan.files, remotes):
            src, done = final / plan.dest(f), self.transfers.done_path(r)
            if r.sha256 and old.get(plan.dest(f)) == r.sha256 and src.is_file() and not done.exists():
                done.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(src, done)
                except OSError:
                    shutil.copyfile(src, done)

    @staticmethod
    def _progress(digest: str, total: int | None, completed: int, file: str) -> dict[str, Any]:
        short = digest.split(":", 1)[-1][:12]
        return {"status": f"pulling {short}", "digest": digest, "total": total or 0, "completed": completed,
                "file": file}

    # ---- Ollama registry ----------------------------------------------------------------------
    def pull_ollama(self, name: str, *, on_event: Event | None = None, cancel: threading.Event | None = None,
                    insecure: bool = False) -> Pulled:
        emit = on_event or (lambda e: None)
        try:
            ref = parse_ollama(name)
        except ValueError as e:
            raise InvalidInput(str(e), "model") from e
        reg = Registry(self.ollama_url, insecure, self.policy)
        emit({"status": "pulling manifest"})
        doc, layers, config = reg.manifest(ref)
        folder = f"{ModelKind.GENERATOR.plural}/{ref.folder}"
        final = self.models_dir / folder
        revision = _manifest_digest(doc)
        wanted = [x for x in layers if x.media_type in LAYER_FILES] + ([config] if config else [])
        dests = list(dict.fromkeys(d for x in wanted if (d := LAYER_FILES.get(x.media_type)) is not None))
        with self.transfers.folder_lock(folder):
            if _installed(final, revision, dests):
                for x in wanted:
                    emit(self._progress(x.digest, x.size, x.size, x.digest))
                emit({"status": "verifying sha256 digest"})
                emit({"status": "success"})
                return Pulled(ref.served_name, final, ModelKind.GENERATOR)
            self.transfers.check_space([x.remote for x in wanted])
            emit({"plan": {"label": ref.tag, "repo": f"{ref.namespace}/{ref.model}", "total": sum(x.size for x in wanted),
                           "files": [{"path": x.media_type[len(MT):] if x.media_type.startswith(MT) else "config",
                                      "size": x.size, "digest": x.digest} for x in wanted]}})
            blobs: dict[str, Path] = {}
            texts: dict[str, str] = {}
            held, installed = [], False
            try:
                for layer in wanted:
                    cb = lambda done, total, d=layer.digest: emit(self._progress(d, total, done, d))  # noqa: E731
                    blob = self.transfers.get(layer.remote, reg.fetcher(ref, layer), cb, cancel)
                    held.append(layer.remote)
                    dest = LAYER_FILES.get(layer.media_type)
                    if dest is not None and dest not in blobs:
                        blobs[dest] = blob
                    else:  # small text layers and the config: read into the manifest
                        texts[layer.media_type] = blob.read_text(errors="replace")
                emit({"status": "verifying sha256 digest"})
                if self.verify_files:
                    check_files(blobs, ref.served_name)
                emit({"status": "writing manifest"})
                manifest = self._ollama_manifest(ref, reg, doc, texts)
                path = install(self.models_dir, folder, blobs, manifest)
                installed = True
            finally:
                for r in held:
                    self.transfers.release(r, drop=installed)
        emit({"status": "success"})
        return Pulled(ref.served_name, path, ModelKind.GENERATOR)

    def _ollama_manifest(self, ref: OllamaRef, reg: Registry, doc: dict[str, Any],
                         texts: dict[str, str]) -> dict[str, Any]:
        m: dict[str, Any] = {"name": ref.served_name, "type": "generator", "format": "gguf",
                             "origin": f"{ref.host}/{ref.namespace}/{ref.model}:{ref.tag}",
                             "source": {"registry": reg.base(ref), "model": f"{ref.namespace}/{ref.model}",
                                        "tag": ref.tag, "revision": _manifest_digest(doc),
                                        "layers": [{"mediaType": x.get("mediaType"), "digest": x.get("digest"),
                                                    "size": x.get("size")} for x in doc.get("layers") or []]}}
        tmpl = texts.get(MT + "template")
        if tmpl:
            m["ollama_template"] = tmpl
            try:
                m["chat_template"] = gotemplate.to_jinja(tmpl)
            except gotemplate.Unsupported as e:
                log.warning("%s: template not translated (%s); the GGUF's own chat template is used",
                            ref.served_name, e)
        if texts.get(MT + "system"):
            m["system"] = texts[MT + "system"]
        if texts.get(MT + "params"):
            m["options"] = read_params(texts[MT + "params"])
        cfg_text = next((v for k, v in texts.items() if not k.startswith(MT)), None)
        if cfg_text:
            try:
                cfg = json.loads(cfg_text)
                m["family"] = cfg.get("model_family") or None
                m["parameter_size"] = cfg.get("model_type") or ""
                m["quantization"] = cfg.get("file_type") or ""
            except (ValueError, AttributeError):
                pass
        return {k: v for k, v in m.items() if v is not None}
