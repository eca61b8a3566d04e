"""LoRA adapters: per request (llama-server's `lora: [{id, scale}]`, or a served name
`base:adapter`), the model's default set (/set_lora and /unset_lora, GenAIServer semantics;
GET/POST /lora-adapters, llama-server's global scales).

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
lock per model orders switches, so the last one asked for is the one in force.

Ids: a model's adapters in name order (what GET /lora-adapters lists), as llama-server numbers
its --lora files. A request's set names every adapter it wants with its scale; the others are
0 (llama-server's rule), and zero scales are dropped. Requests with different sets run at the
same time: the engine decodes each set's sequences in their own decode of every step."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inferd.kinds import GENERATOR
from inferd.errors import InvalidInput, ModelLoadFailed, NotFound
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.service.core import Catalog
from inferd.scheduling.jobs import Adapters
from inferd.service.handles import GeneratorHandle
from inferd.types import LoraRef

MAX_SCALE = 100.0  # |scale| beyond this is no adapter, only overflow


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
        self.chosen: dict[str, dict[str, float]] = {}  # model -> default set: adapter name -> scale
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, model: str) -> asyncio.Lock:
        return self._locks.setdefault(model, asyncio.Lock())

    @staticmethod
    def label(chosen: dict[str, float] | None) -> str | None:
        """The catalog's `lora`: the adapter's name, several joined by '+', None for base weights."""
        return "+".join(sorted(chosen)) if chosen else None

    def info(self, spec: ModelSpec) -> dict[str, Any]:
        """Catalog fields of a generator: the active adapter (None: base weights) and the
        adapters it offers. Empty for other kinds."""
        if spec.kind is not ModelKind.GENERATOR:
            return {}
        return {"lora": self.label(self.chosen.get(spec.name)), "loras": sorted(adapter_names(spec))}

    def served_names(self, spec: ModelSpec) -> list[str]:
        """`base:adapter` for each adapter: the names a request may use as `model` (vLLM-like)."""
        return [f"{spec.name}:{a}" for a in sorted(adapter_names(spec))] if spec.kind is ModelKind.GENERATOR else []

    def split_model(self, model: str | None) -> tuple[str | None, LoraRef | None]:
        """`base:adapter` -> (base, that adapter at scale 1) when `base` is a served generator
        offering it and the whole name is no served model itself; else (model, None)."""
        if not model or ":" not in model or self.registry.lookup(model) is not None:
            return model, None
        base, _, name = model.rpartition(":")
        spec = self.registry.lookup(base)
        if spec is None or spec.kind is not ModelKind.GENERATOR or name not in adapter_names(spec):
            return model, None
        return spec.name, LoraRef(name=name, scale=1.0)

    def adapters_table(self, spec: ModelSpec) -> list[dict[str, Any]]:
        """GET /lora-adapters: id, path, name and the default scale of each adapter."""
        chosen = self.chosen.get(spec.name) or {}
        return [{"id": i, "path": str(p), "name": n, "scale": chosen.get(n, 0.0)}
                for i, (n, p) in enumerate(sorted(adapter_names(spec).items()))]

    def resolve(self, spec: ModelSpec, refs: list[LoraRef], param: str = "lora") -> dict[str, float]:
        """A request's adapter list -> adapter name -> scale (400 for an unknown id, a repeated
        adapter or a scale out of range)."""
        offered = sorted(adapter_names(spec).items())
        out: dict[str, float] = {}
        for i, r in enumerate(refs):
            if r.name is not None:
                name = r.name
                if name not in dict(offered):
                    have = ", ".join(n for n, _p in offered) or "none (no loras/ folder)"
                    raise NotFound(f"model '{spec.name}' has no LoRA adapter {name!r} (adapters: {have})")
            elif r.id is None or not 0 <= r.id < len(offered):
                raise InvalidInput(f"{param}[{i}].id: model '{spec.name}' has {len(offered)} LoRA adapter(s); "
                                   f"ids are 0..{len(offered) - 1} (GET /lora-adapters)" if offered else
                                   f"{param}[{i}].id: model '{spec.name}' has no LoRA adapters", f"{param}.{i}.id")
            else:
                name = offered[r.id][0]
            if not -MAX_SCALE <= r.scale <= MAX_SCALE or r.scale != r.scale:
                raise InvalidInput(f"{param}[{i}].scale must be between -{MAX_SCALE:g} and {MAX_SCALE:g}",
                                   f"{param}.{i}.scale")
            if name in out:
                raise InvalidInput(f"{param}[{i}]: adapter {name!r} is listed twice", f"{param}.{i}")
            out[name] = float(r.scale)
        return out

    def paths(self, spec: ModelSpec, chosen: dict[str, float]) -> Adapters:
        """name -> scale as the engine's key: sorted (path, scale), no zero scales."""
        offered = adapter_names(spec)
        missing = [n for n in chosen if n not in offered]
        if missing:
            raise ModelLoadFailed(f"LoRA adapter {missing[0]!r} of model '{spec.name}' is no longer in its "
                                  "loras/ folder; choose another with /set_lora or /lora-adapters")
        return tuple(sorted((str(offered[n]), s) for n, s in chosen.items() if s != 0.0))

    async def set(self, model: str | None, name: str | None) -> tuple[ModelSpec, str | None]:
        """Activate adapter `name` of generator `model` (None: base weights); returns once
        it is in force. -> (spec, previous adapter)."""
        spec = self.catalog.resolve(model, ModelKind.GENERATOR)
        chosen: dict[str, float] = {}
        if name is not None:
            name = check_adapter_name(name)
            offered = adapter_names(spec)
            if name not in offered:
                have = ", ".join(sorted(offered)) or "none (no loras/ folder)"
                raise NotFound(f"model '{spec.name}' has no LoRA adapter {name!r} (adapters: {have})")
            chosen = {name: 1.0}
        return spec, await self._apply(spec, chosen)

    async def set_scales(self, model: str | None, refs: list[LoraRef]) -> ModelSpec:
        """POST /lora-adapters: the default set becomes exactly these scales (others 0)."""
        spec = self.catalog.resolve(model, ModelKind.GENERATOR)
        await self._apply(spec, self.resolve(spec, refs, "body"))
        return spec

    async def _apply(self, spec: ModelSpec, chosen: dict[str, float]) -> str | None:
        chosen = {n: s for n, s in chosen.items() if s != 0.0}
        async with self._lock(spec.name):
            previous = self.label(self.chosen.get(spec.name))
            async with self.registry.use(spec.name, GENERATOR) as handle:
                if not isinstance(handle, GeneratorHandle):
                    raise InvalidInput(f"model '{spec.name}' does not support LoRA adapters", "model")
                key = self.paths(spec, chosen)
                for path, _s in key:  # a bad file is this call's 400, before it becomes the default
                    await asyncio.to_thread(handle.runtime.load_adapter, path)
                self.chosen[spec.name] = chosen
                await handle.set_lora(self.label(chosen), key)
        return previous

    async def ensure(self, spec: ModelSpec, handle: GeneratorHandle) -> None:
        """Bring a (re)loaded handle to the adapters chosen for its model."""
        if handle.lora == self.label(self.chosen.get(spec.name)):
            return
        async with self._lock(spec.name):
            chosen = self.chosen.get(spec.name) or {}
            if handle.lora != self.label(chosen):
                key = self.paths(spec, chosen)
                for path, _s in key:
                    await asyncio.to_thread(handle.runtime.load_adapter, path)
                await handle.set_lora(self.label(chosen), key)

    async def for_request(self, spec: ModelSpec, handle: GeneratorHandle, refs: list[LoraRef] | None
                          ) -> Adapters | None:
        """The engine key of a request's own set (None: the model's default, fixed by the
        engine when the job is admitted); its adapters are loaded before the job is submitted."""
        if refs is None:
            return None
        key = self.paths(spec, self.resolve(spec, refs))
        for path, _s in key:
            await asyncio.to_thread(handle.runtime.load_adapter, path)
        return key


__all__ = ["LoraService", "adapter_names", "check_adapter_name"]
