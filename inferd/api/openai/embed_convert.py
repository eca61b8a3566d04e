"""OpenAI-face embeddings and rerank: wire <-> engine. Pure functions."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.api.openai.embed_schemas import EmbeddingRequest, RerankRequest
from inferd.errors import InvalidInput, ModelNotSupported
from inferd.service import EmbedResult, RerankResult


def embed_inputs(req: EmbeddingRequest) -> list[str | list[int]]:
    x = req.input
    if isinstance(x, str):
        return [x]
    items: list[Any] = list(x)
    if items and all(isinstance(i, int) for i in items):
        return [items]  # one token-id sequence
    # strings, or token-id sequences (the schema allows no mix with bare ids)
    return [item if isinstance(item, str) else list(item) for item in items]


def vector(v: Any, encoding_format: str) -> Any:
    """Dense: the float32 array itself (FastJSONResponse writes it as a JSON array of
    numbers), or base64 of little-endian float32 (what OpenAI sends and its client decodes).
    Sparse: {"indices", "values"}."""
    if isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v, dtype="<f4")
        return base64.b64encode(a.tobytes()).decode("ascii") if encoding_format == "base64" else a
    return sparse(v)


def sparse(v: Any) -> dict[str, list]:
    return {"indices": v.indices.tolist(), "values": v.values.tolist()}


def check_dense(spec: Any) -> None:
    """OpenAI's `embedding` is an array of numbers; a sparse vector has no place in it."""
    if "sparse" in spec.capabilities:
        raise ModelNotSupported(f"model '{spec.name}' is a sparse embedder; OpenAI embeddings are dense "
                                "arrays: use /ai/v1/embeddings for its {indices, values} vectors")


def check_format(r_sparse: bool, encoding_format: str) -> None:
    if r_sparse and encoding_format == "base64":
        raise InvalidInput("encoding_format base64 applies to dense vectors; this model is sparse",
                           "encoding_format")


def embeddings_response(r: EmbedResult, encoding_format: str) -> dict[str, Any]:
    if r.sparse:  # the route checks the spec first; this holds for a model that said nothing
        raise ModelNotSupported(f"model '{r.model}' is a sparse embedder; OpenAI embeddings are dense "
                                "arrays: use /ai/v1/embeddings for its {indices, values} vectors")
    return {"object": "list", "model": r.model,
            "data": [{"object": "embedding", "index": i, "embedding": vector(v, encoding_format)}
                     for i, v in enumerate(r.items)],
            "usage": {"prompt_tokens": r.prompt_tokens, "total_tokens": r.prompt_tokens}}


def rerank_documents(req: RerankRequest) -> list[str]:
    return [d if isinstance(d, str) else d.text for d in req.documents]


def rerank_response(r: RerankResult, docs: Sequence[str], top_n: int | None, return_documents: bool,
                    request_id: str) -> dict[str, Any]:
    order = sorted(range(len(r.scores)), key=lambda i: -r.scores[i])
    if top_n is not None:
        order = order[:top_n]
    results = []
    for i in order:
        item: dict[str, Any] = {"index": i, "relevance_score": r.scores[i]}
        if return_documents:
            item["document"] = {"text": docs[i]}
        results.append(item)
    return {"id": request_id, "object": "list", "model": r.model, "results": results,
            "usage": {"prompt_tokens": r.prompt_tokens, "total_tokens": r.prompt_tokens}}
