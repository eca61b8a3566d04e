"""Ollama embeddings: wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.api.ollama.convert import tagged
from inferd.errors import ModelNotSupported
from inferd.service import EmbedResult


def _dense(r: EmbedResult) -> None:
    if r.sparse:
        raise ModelNotSupported(f"model '{r.model}' is a sparse embedder; Ollama embeddings are dense "
                                "(use /ai/v1/embeddings)")


def _array(v: Any) -> np.ndarray:
    """float32, contiguous: what FastJSONResponse writes as a JSON array of numbers."""
    return np.ascontiguousarray(v, dtype=np.float32)


def embed_response(r: EmbedResult, total_ns: int, load_ns: int) -> dict[str, Any]:
    _dense(r)
    return {"model": tagged(r.model), "embeddings": [_array(v) for v in r.items], "total_duration": total_ns,
            "load_duration": load_ns, "prompt_eval_count": r.prompt_tokens}


def legacy_response(r: EmbedResult) -> dict[str, Any]:
    _dense(r)
    return {"embedding": _array(r.items[0])}
