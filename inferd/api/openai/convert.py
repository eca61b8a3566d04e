"""Engine -> OpenAI wire shapes. Pure functions."""

from __future__ import annotations

from typing import Any, Callable

from inferd.models import ModelKind, ModelSpec

# What the OpenAI face can use: chat/completions, embeddings, rerank, audio.
OPENAI_KINDS = (ModelKind.GENERATOR, ModelKind.EMBEDDER, ModelKind.RERANKER, ModelKind.TRANSCRIBER)


def model_entry(spec: ModelSpec, created: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """`extra`: per-model state to show (a generator's active LoRA adapter and its adapters)."""
    return {"id": spec.name, "object": "model", "created": created, "owned_by": "inferd",
            "kind": spec.kind.value, "capabilities": sorted(spec.capabilities), **(extra or {})}


def adapter_entry(name: str, base: ModelSpec, created: int) -> dict[str, Any]:
    """A LoRA adapter served as `base:adapter` (vLLM lists its adapters with `parent`)."""
    return {"id": name, "object": "model", "created": created, "owned_by": "inferd", "kind": base.kind.value,
            "capabilities": sorted(base.capabilities), "parent": base.name, "root": base.name}


def model_list(specs: list[ModelSpec], created: int, extras: Callable[[ModelSpec], dict[str, Any]] | None = None
               ) -> dict[str, Any]:
    return {"object": "list", "data": [model_entry(s, created, extras(s) if extras else None) for s in specs]}
