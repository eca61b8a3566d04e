"""LoRA adapter switching: /set_lora and /unset_lora (GenAIServer semantics).

Adapters of a generator live in its folder: `generators/<name>/loras/<adapter>.gguf`, or a
folder per adapter, `loras/<adapter>/<file>.gguf`. An adapter is named by that single
file or folder name; a name that is a path, or holds '..', is a 400; one that does not
exist is a 404.

The choice is the service's, per model (`_lora`): it is applied to the loaded runtime
at once (the runtime waits for the requests already submitted to that model, and holds
later ones until the switch is done; other models are untouched), and again to a fresh
runtime if the model is unloaded and loaded later (`ensure_lora`, on each request: a dict
lookup when nothing changed). A lock per model orders switches, so the last one asked
for is the one in force."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inferd.errors import InvalidInput, ModelLoadFailed, NotFound
from inferd.registry.spec import ModelKind, ModelSpec

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


class LoraVerbs:
    _lora: dict[str, str | None]  # model -> chosen adapter (set by InferenceService.__post_init__)
    _lora_locks: dict[str, asyncio.Lock]

    def _lock(self, model: str) -> asyncio.Lock:
        return self._lora_locks.setdefault(model, asyncio.Lock())

    def lora_info(self, spec: ModelSpec) -> dict[str, Any]:
        """Catalog fields of a generator: the active adapter (None: base weights) and the
        adapters it offers. Empty for other kinds."""
        if spec.kind is not ModelKind.GENERATOR:
            return {}
        return {"lora": self._lora.get(spec.name), "loras": sorted(adapter_names(spec))}

    async def set_lora(self, model: str | None, name: str | None) -> tuple[ModelSpec, str | None]:
        """Activate adapter `name` of generator `model` (None: base weights); returns once
        it is in force. -> (spec, previous adapter)."""
        spec = self.generator_spec(model)  # type: ignore[attr-defined]
        path = None
        if name is not None:
            name = check_adapter_name(name)
            offered = adapter_names(spec)
            path = offered.get(name)
            if path is None:
                have = ", ".join(sorted(offered)) or "none (no loras/ folder)"
                raise NotFound(f"model '{spec.name}' has no LoRA adapter {name!r} (adapters: {have})")
        async with self._lock(spec.name):
            previous = self._lora.get(spec.name)
            async with self.registry.use(spec.name, GEN) as rt:  # type: ignore[attr-defined]
                if not hasattr(rt, "set_lora"):
                    raise InvalidInput(f"model '{spec.name}' does not support LoRA adapters", "model")
                await rt.set_lora(name, path)
            self._lora[spec.name] = name
        return spec, previous

    async def ensure_lora(self, spec: ModelSpec, rt: Any) -> None:
        """Bring a (re)loaded runtime to the adapter chosen for its model."""
        want = self._lora.get(spec.name)
        if getattr(rt, "lora", None) == want:
            return
        async with self._lock(spec.name):
            want = self._lora.get(spec.name)
            if rt.lora != want:
                path = adapter_names(spec).get(want) if want else None
                if want and path is None:
                    raise ModelLoadFailed(f"LoRA adapter {want!r} of model '{spec.name}' is no longer in its "
                                          "loras/ folder; choose another with /set_lora or /unset_lora")
                await rt.set_lora(want, path)


__all__ = ["LoraVerbs", "adapter_names", "check_adapter_name"]
