"""What a catalog says about a generator without loading it: the chat template in use, and
the capabilities that follow from it (Ollama's /api/show)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from inferd.chat.reasoning import reasoning_markers
from inferd.chat.templates import builtin_template
from inferd.kinds import GENERATOR
from inferd.models import ModelKind, ModelSpec, model_ggufs
from inferd.registry.registry import Registry


@functools.lru_cache(maxsize=256)
def _gguf_template(path: str, mtime: float) -> str | None:
    from inferd.runtimes.llama_cpp.model import read_chat_template

    template, arch = read_chat_template(Path(path))
    return template or builtin_template(arch)


def _weights(spec: ModelSpec) -> Path | None:
    path = spec.path
    if path is None:
        return None
    if path.is_dir():
        files = [p for p in model_ggufs(path) if "-of-" not in p.stem or "-00001-of-" in p.stem]
        return files[0] if files else None
    return path


async def chat_template(registry: Registry, spec: ModelSpec) -> str | None:
    """The template chat requests to `spec` are rendered with (the runtime's own choice when
    loaded; else the same order: manifest, GGUF metadata, built-in per architecture)."""
    if spec.kind is not ModelKind.GENERATOR:
        return None
    handle = registry.handle(spec.name, GENERATOR)
    if handle is not None:  # the runtime chose its template at load
        return handle.runtime.chat_template
    if spec.manifest.get("chat_template"):
        return str(spec.manifest["chat_template"])
    weights = _weights(spec)
    if weights is None or spec.format != "gguf":  # a built-in assembled on first load
        return builtin_template(spec.family)
    return await asyncio.to_thread(_gguf_template, str(weights), weights.stat().st_mtime)


def capabilities(spec: ModelSpec, template: str | None) -> list[str]:
    """Ollama's capability names, as inferd serves them: tools for every model that can chat
    (a template that does not render tools gets them in its system prompt), thinking when
    the template can think; vision when it has a projector."""
    if spec.kind is ModelKind.EMBEDDER:
        return ["embedding"]
    caps = ["completion"]
    if template:
        caps.append("tools")
        if reasoning_markers(template) is not None:
            caps.append("thinking")
    if "vision" in spec.capabilities:  # a projector beside its weights (or --mmproj)
        caps.append("vision")
    return caps
