"""Ollama embeddings: wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any

from inferd.api.ollama.convert import tagged
from inferd.errors import ModelNotSupported
from inferd.service import EmbedResult


def _dense(r: EmbedResult) -> None:
    if r.sparse:
        raise ModelNotSupported(f"model '{r.model}' is a sparse embedder; Ollama embeddings are dense "
                                "(use /ai/v1/embeddings)")


def embed_response(r: EmbedResult, total_ns: int, load_ns: int) -> dict[str, Any]:
    _dense(r)
    return {"model": tagged(r.model), "embeddings": [v.tolist() for v in r.items], "total_duration": total_ns,
            "load_duration": load_ns, "prompt_eval_count": r.prompt_tokens}


def legacy_response(r: EmbedResult) -> dict[str, Any]:
    _dense(r)
    return {"embedding": r.items[0].tolist()}
