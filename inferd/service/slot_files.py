"""llama-server's slot save/restore/erase (`POST /slots/{id}?action=...`, `--slot-save-path`).

A slot's sequence (its KV cells and the token ids they hold) is written with llama.cpp's own
sequence-file format (llama_state_seq_save_file), so a file saved here has the layout
llama-server writes for the same model and build, and restored into a slot with
llama_state_seq_load_file, which checks the format, the model's layers and types and the
token count (a file of another model is refused, never half-loaded).

Filenames: one plain name inside `--slot-save-path` (letters, digits, `._-`, no leading dot,
no `..`, at most 255 bytes): no separator, absolute path or parent can reach outside it.
Writes go to a `.tmp-*` file and are renamed into place, so a failed save never leaves half
a file under the name asked for.

Every action runs on the model's worker thread once the jobs submitted before it are done
(GenerationEngine.call_when_idle, without clearing the cache): a slot is never saved or
overwritten while it decodes, as llama-server defers a slot task until the slot is idle.

Model: `?model=` names the generator (loaded if needed); it may be left out only when the
server serves a single generator (never "the one loaded now": that changes with traffic)."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferd.errors import InferenceFailed, InvalidInput, NotFound, NotImplementedYet
from inferd.kinds import GENERATOR
from inferd.models import ModelKind

ACTIONS = ("save", "restore", "erase")
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}$")


def check_filename(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name or name.endswith("."):
        raise InvalidInput("Invalid filename: a plain file name (letters, digits, '.', '_', '-'; no path, "
                           "no leading dot, no '..')", "filename")
    return name


def pick_generator(svc: Any, model: str | None) -> str:
    if model is not None:
        return svc.resolve(model, ModelKind.GENERATOR).name  # 404 unknown, 400 not a generator
    served = [s.name for s in svc.models(ModelKind.GENERATOR)]
    if len(served) == 1:  # not "the loaded one": which is loaded changes; the answer must not
        return served[0]
    raise InvalidInput(f"this server serves {len(served)} generators: name one with ?model=", "model")


async def slot_action(svc: Any, folder: Path | None, id_slot: int, action: str, filename: object,
                      model: str | None) -> dict[str, Any]:
    if action not in ACTIONS:  # a malformed request is a 400 whether or not the routes are on
        raise InvalidInput(f"Invalid action {action!r}: one of {', '.join(ACTIONS)}", "action")
    if folder is None:
        raise NotImplementedYet("This server does not support slots action. Start it with --slot-save-path")
    name = check_filename(filename) if action != "erase" else None
    spec_name = pick_generator(svc, model)
    async with svc.registry.use(spec_name, GENERATOR) as handle:
        engine = handle.scheduler
        if not 0 <= id_slot < len(engine.slots):
            raise InvalidInput(f"Invalid slot ID {id_slot}: this model has slots 0-{len(engine.slots) - 1}", "id_slot")
        if action == "restore" and not (folder / str(name)).is_file():
            raise NotFound(f"no saved slot file {name!r}")
        fn = _ACTIONS[action]
        fut = engine.call_when_idle(lambda: fn(engine, id_slot, folder, name), reset_cache=False)
        out: dict[str, Any] = await asyncio.wrap_future(fut)
        return out


def _save(engine: Any, i: int, folder: Path, name: str) -> dict[str, Any]:
    slot = engine.slots[i]
    tokens = list(slot.cache)
    if any(t < 0 for t in tokens):
        raise InvalidInput("this slot holds an image; its placeholder tokens cannot be saved", "id_slot")
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tmp = folder / f".tmp-{secrets.token_hex(6)}-{name}"
    try:
        n = engine.backend.save_seq_file(i, str(tmp), tokens)
        if n <= 0:
            raise InferenceFailed(f"llama.cpp could not write slot {i} to {name!r}")
        os.replace(tmp, folder / name)
    except OSError as e:
        raise InferenceFailed(f"could not write slot file {name!r}: {e.strerror or e}") from e
    finally:
        tmp.unlink(missing_ok=True)
    return {"id_slot": i, "filename": name, "n_saved": len(tokens), "n_written": n,
            "timings": {"save_ms": (time.perf_counter() - t0) * 1000}}


def _restore(engine: Any, i: int, folder: Path, name: str) -> dict[str, Any]:
    slot = engine.slots[i]
    t0 = time.perf_counter()
    engine.backend.seq_rm(i, -1, -1)
    slot.cache, slot.key = [], None
    n, tokens = engine.backend.load_seq_file(i, str(folder / name))
    if n <= 0:
        engine.backend.seq_rm(i, -1, -1)
        raise InvalidInput(f"could not restore {name!r}: not a slot file of this model and context "
                           "(or it holds more tokens than a slot)", "filename")
    slot.cache = tokens
    slot.last_used = time.perf_counter()
    return {"id_slot": i, "filename": name, "n_restored": len(tokens), "n_read": n,
            "timings": {"restore_ms": (time.perf_counter() - t0) * 1000}}


def _erase(engine: Any, i: int, folder: Path, name: Any) -> dict[str, Any]:
    slot = engine.slots[i]
    n = len(slot.cache)
    engine.backend.seq_rm(i, -1, -1)
    slot.cache, slot.key = [], None
    return {"id_slot": i, "n_erased": n}


_ACTIONS: dict[str, Callable[[Any, int, Path, Any], dict[str, Any]]] = {"save": _save, "restore": _restore,
                                                                      "erase": _erase}
