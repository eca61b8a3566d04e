"""Antfly embeddings and rerank: wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any

from inferd.api.antfly.embed_schemas import ContentPart, EmbedRequest, MultimodalDocument
from inferd.api.errors import classify, item_error
from inferd.api.openai.embed_convert import check_format, vector
from inferd.errors import CapabilityMissing, InferdError, InvalidInput
from inferd.service import EmbedResult, RerankResult


def _text_of(parts: list[ContentPart], where: str) -> str:
    texts = []
    for p in parts:
        if p.type != "text":
            raise CapabilityMissing(f"{where} has a {p.type} part; no served text encoder can embed images "
                                    "(needs the 'image' capability)")
        texts.append(p.text or "")
    return "\n".join(texts)


def embed_inputs(req: EmbedRequest) -> list[str | InferdError]:
    """Texts in order; an item that cannot be served (an image part) is its error, so that
    error_policy decides whether it fails the request or only itself."""
    items = [req.input] if isinstance(req.input, str) else req.input
    out: list[str | InferdError] = []
    for i, x in enumerate(items):
        try:
            if isinstance(x, str):
                out.append(x)
            else:
                out.append(_text_of(x if isinstance(x, list) else [x], f"input[{i}]"))
        except InferdError as e:
            out.append(e)
    return out


def task_of(req: EmbedRequest) -> str | None:
    if req.task_type and req.input_type and req.task_type.lower() != req.input_type.lower():
        # Both given: task_type is the current name and wins.
        return req.task_type
    return req.task_type or req.input_type


def _item_error(index: int, e: InferdError) -> dict[str, Any]:
    stage = "validate" if isinstance(e, (InvalidInput, CapabilityMissing)) else "inference"
    return {"index": index, **item_error(e), "stage": stage, "status": classify(e)[0]}


def embeddings_response(r: EmbedResult, items: list[Any], encoding_format: str, per_item: bool) -> dict[str, Any]:
    check_format(r.sparse, encoding_format)
    data, errors = [], []
    for i, v in enumerate(items):
        if isinstance(v, InferdError):
            errors.append(_item_error(i, v))
        else:
            data.append({"object": "embedding", "index": i, "embedding": vector(v, encoding_format)})
    out: dict[str, Any] = {"object": "list", "data": data, "model": r.model,
                           "usage": {"prompt_tokens": r.prompt_tokens, "total_tokens": r.prompt_tokens}}
    if r.truncated:  # Antfly keeps cutting long inputs, and says which ones it cut
        out["truncated"] = r.truncated
    if per_item:
        out["errors"] = errors
        out["summary"] = {"total": len(items), "succeeded": len(data), "failed": len(errors)}
    return out


def multimodal_texts(docs: list[MultimodalDocument]) -> list[str]:
    out = []
    for i, d in enumerate(docs):
        if d.content is None:
            raise InvalidInput(f"documents[{i}].content is required", f"documents[{i}].content")
        out.append(d.content if isinstance(d.content, str) else _text_of(d.content, f"documents[{i}]"))
    return out


def rerank_response(r: RerankResult) -> dict[str, Any]:
    return {"object": "list", "model": r.model,
            "data": [{"object": "rerank.score", "index": i, "score": s} for i, s in enumerate(r.scores)],
            "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": 0, "total_tokens": r.prompt_tokens,
                      "cached_prompt_tokens": 0}}
