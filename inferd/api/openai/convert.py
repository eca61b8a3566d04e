"""Engine -> OpenAI wire shapes. Pure functions."""

from __future__ import annotations

from typing import Any

from inferd.registry.spec import ModelKind, ModelSpec

# What the OpenAI face can use: chat/completions, embeddings, rerank, audio.
OPENAI_KINDS = (ModelKind.GENERATOR, ModelKind.EMBEDDER, ModelKind.RERANKER, ModelKind.TRANSCRIBER)


def model_entry(spec: ModelSpec, created: int) -> dict[str, Any]:
    return {"id": spec.name, "object": "model", "created": created, "owned_by": "inferd",
            "kind": spec.kind.value, "capabilities": sorted(spec.capabilities)}


def model_list(specs: list[ModelSpec], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_entry(s, created) for s in specs]}
