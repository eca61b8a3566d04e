"""Engine -> OpenAI wire shapes. Pure functions."""

from __future__ import annotations

from typing import Any, Callable

from inferd.kinds import KINDS, listed_in
from inferd.models import ModelKind, ModelSpec


def openai_kinds() -> tuple[ModelKind, ...]:
    """The kinds the OpenAI face lists and resolves (those it can use: chat/completions,
    embeddings, rerank, audio): each KindSpec whose `faces` name "openai". Read per call, so a
    kind registered after import is listed too."""
    return listed_in("openai")


def model_entry(spec: ModelSpec, created: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """`extra`: per-model state to show (a generator's active LoRA adapter and its adapters)."""
    facts = KINDS[spec.kind].catalog  # the kind's own fields: a voice's voices and sample rate
    return {"id": spec.name, "object": "model", "created": created, "owned_by": "inferd",
            "kind": spec.kind.value, "capabilities": sorted(spec.capabilities), **(facts(spec) if facts else {}),
            **(extra or {})}


def model_meta(header: dict[str, Any], n_ctx: int | None = None) -> dict[str, Any]:
    """llama-server's `meta` of a /v1/models entry, from a GGUF header: the trained context
    (`n_ctx_train`), the embedding size (`n_embd`), the vocabulary, and once the model is
    loaded the context each slot has (`n_ctx`). {} without a header."""
    arch = header.get("general.architecture")
    if not arch:
        return {}
    tokens = header.get("tokenizer.ggml.tokens")
    meta = {"n_ctx_train": header.get(f"{arch}.context_length"), "n_embd": header.get(f"{arch}.embedding_length"),
            "n_vocab": len(tokens) if isinstance(tokens, list) else None, "n_ctx": n_ctx}
    return {"meta": {k: v for k, v in meta.items() if v is not None}}


def adapter_entry(name: str, base: ModelSpec, created: int) -> dict[str, Any]:
    """A LoRA adapter served as `base:adapter` (vLLM lists its adapters with `parent`)."""
    return {"id": name, "object": "model", "created": created, "owned_by": "inferd", "kind": base.kind.value,
            "capabilities": sorted(base.capabilities), "parent": base.name, "root": base.name}


def model_list(specs: list[ModelSpec], created: int, extras: Callable[[ModelSpec], dict[str, Any]] | None = None
               ) -> dict[str, Any]:
    return {"object": "list", "data": [model_entry(s, created, extras(s) if extras else None) for s in specs]}
