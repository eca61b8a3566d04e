"""LoRA adapter switching: /set_lora and /unset_lora (GenAIServer semantics).

Adapters of a generator live in its folder: `generators/<name>/loras/<adapter>.gguf`, or a
folder per adapter, `loras/<adapter>/<file>.gguf`. An adapter is named by that single
file or folder name; a name that is a path, or holds '..', is a 400; one that does not
exist is a 404.

The choice is the service's, per model (`chosen`): it is applied to the loaded handle at
once (the engine waits for the requests already submitted to that model, and holds later
ones until the switch is done; other models are untouched), and again to a fresh handle
if the model is unloaded and loaded later (`ensure`, on each request: a comparison when
nothing changed). The choice is recorded before the switch and the switch itself is
shielded and recorded by the worker that applies it (GeneratorHandle.set_lora), so a
requester cancelled mid-switch cannot leave the weights and the reported name apart. A
lock per model orders switches, so the last one asked for is the one in force."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inferd.errors import InvalidInput, ModelLoadFailed, NotFound
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.service.core import Catalog
from inferd.service.handles import GeneratorHandle

GEN = [ModelKind.GENERATOR]


def adapter_names(spec: ModelSpec) -> dict[str, Path]:
    """The adapters a generator offers: name -> weights file."""
    if spec.path is None or not Path(spec.path).is_dir():
        return {}
    root = Path(spec.path) / "loras"
    if not root.is_dir():
        return {}
    found: dict[str, Path] = {}
    for p in sorted(root.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_file() and p.suffix == ".gguf":
            found[p.stem] = p
        elif p.is_dir():
            files = sorted(p.glob("*.gguf"))
            if files:
                found.setdefault(p.name, files[0])
    return found


def check_adapter_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("'name' is required: the adapter's file or folder name in the model's loras/", "name")
    if "/" in name or "\\" in name or ".." in name or name.startswith(".") or Path(name).is_absolute() \
            or any(ord(c) < 32 for c in name):
        raise InvalidInput(f"adapter name {name!r} must be a single file or folder name (no paths, no '..')", "name")
    return name


class LoraService:
    def __init__(self, catalog: Catalog, registry: Registry):
        self.catalog, self.registry = catalog, registry
        self.chosen: dict[str, str | None] = {}  # model -> chosen adapter (None: base weights)
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, model: str) -> asyncio.Lock:
        return self._locks.setdefault(model, asyncio.Lock())

    def info(self, spec: ModelSpec) -> dict[str, Any]:
        """Catalog fields of a generator: the active adapter (None: base weights) and the
        adapters it offers. Empty for other kinds."""
        if spec.kind is not ModelKind.GENERATOR:
            return {}
        return {"lora": self.chosen.get(spec.name), "loras": sorted(adapter_names(spec))}

    async def set(self, model: str | None, name: str | None) -> tuple[ModelSpec, str | None]:
        """Activate adapter `name` of generator `model` (None: base weights); returns once
        it is in force. -> (spec, previous adapter)."""
        spec = self.catalog.resolve(model, ModelKind.GENERATOR)
        path = None
        if name is not None:
            name = check_adapter_name(name)
            offered = adapter_names(spec)
            path = offered.get(name)
            if path is None:
                have = ", ".join(sorted(offered)) or "none (no loras/ folder)"
                raise NotFound(f"model '{spec.name}' has no LoRA adapter {name!r} (adapters: {have})")
        async with self._lock(spec.name):
            previous = self.chosen.get(spec.name)
            async with self.registry.use(spec.name, GEN) as handle:
                if not isinstance(handle, GeneratorHandle):
                    raise InvalidInput(f"model '{spec.name}' does not support LoRA adapters", "model")
                self.chosen[spec.name] = name
                await handle.set_lora(name, path)
        return spec, previous

    async def ensure(self, spec: ModelSpec, handle: GeneratorHandle) -> None:
        """Bring a (re)loaded handle to the adapter chosen for its model."""
        if handle.lora == self.chosen.get(spec.name):
            return
        async with self._lock(spec.name):
            want = self.chosen.get(spec.name)
            if handle.lora != want:
                path = adapter_names(spec).get(want) if want else None
                if want and path is None:
                    raise ModelLoadFailed(f"LoRA adapter {want!r} of model '{spec.name}' is no longer in its "
                                          "loras/ folder; choose another with /set_lora or /unset_lora")
                await handle.set_lora(want, path)


__all__ = ["LoraService", "adapter_names", "check_adapter_name"]
