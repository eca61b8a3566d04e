"""Ollama wire shapes shared by its routes: the catalog (tags, ps, show) and `keep_alive`.
Pure functions."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from inferd.config import parse_duration
from inferd.errors import InvalidInput
from inferd.registry.spec import ModelKind, ModelSpec

# Ollama serves chat/generate models and embedding models; other kinds are not its business.
OLLAMA_KINDS = (ModelKind.GENERATOR, ModelKind.EMBEDDER)
_FOREVER = "2318-01-01T00:00:00Z"
_FOREVER_TS = dt.datetime(2318, 1, 1, tzinfo=dt.timezone.utc).timestamp()


def keep_alive(value: str | float | None) -> float | None:
    """Ollama's `keep_alive` ("5m", 300, -1 = forever, 0 = unload now) in seconds; None: not given."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as e:
        raise InvalidInput(str(e), "keep_alive") from e


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _mtime(spec: ModelSpec, default: float) -> float:
    try:
        return spec.path.stat().st_mtime if spec.path else default
    except OSError:
        return default


def digest(spec: ModelSpec) -> str:
    # Identity of the file set, not a content hash: hashing GBs of weights per listing is waste.
    key = f"{spec.name}:{spec.path}:{spec.size_bytes}:{_mtime(spec, 0)}"
    return hashlib.sha256(key.encode()).hexdigest()


def details(spec: ModelSpec) -> dict[str, Any]:
    m = spec.manifest
    return {"parent_model": "", "format": spec.format, "family": spec.family, "families": [spec.family],
            "parameter_size": str(m.get("parameter_size", "")), "quantization_level": str(m.get("quantization", ""))}


def ollama_capabilities(spec: ModelSpec) -> list[str]:
    if spec.kind is ModelKind.EMBEDDER:
        return ["embedding"]
    caps = ["completion"]
    caps += [c for c in ("tools", "thinking", "vision") if c in spec.capabilities]
    return caps


def tag(spec: ModelSpec, started_at: float) -> dict[str, Any]:
    return {"name": spec.name, "model": spec.name, "modified_at": iso(_mtime(spec, started_at)),
            "size": spec.size_bytes, "digest": digest(spec), "details": details(spec)}


def tags(specs: list[ModelSpec], started_at: float) -> dict[str, Any]:
    return {"models": [tag(s, started_at) for s in specs]}


def ps(loaded: list[dict[str, Any]]) -> dict[str, Any]:
    out = []
    for e in loaded:
        spec: ModelSpec = e["spec"]
        if spec.kind not in OLLAMA_KINDS:
            continue
        exp = e["expires_at"]
        size = e.get("size_bytes") or spec.size_bytes  # estimated resident size: weights + KV cache
        out.append({"name": spec.name, "model": spec.name, "size": size, "digest": digest(spec),
                    "details": details(spec), "size_vram": 0,
                    # Ollama reports a far-future time for models kept forever; a keep_alive
                    # that ends later than that (1e300 s) is forever too, and beyond datetime's range.
                    "expires_at": iso(exp) if exp is not None and exp < _FOREVER_TS else _FOREVER})
    return {"models": out}


def show(spec: ModelSpec, started_at: float) -> dict[str, Any]:
    return {"modelfile": f"FROM {spec.path or spec.name}\n", "parameters": "", "template": "",
            "details": details(spec), "model_info": {"general.architecture": spec.family},
            "capabilities": ollama_capabilities(spec), "modified_at": iso(_mtime(spec, started_at))}
