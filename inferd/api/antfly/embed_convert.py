"""Antfly embeddings and rerank: wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any

from inferd.api.antfly.embed_schemas import ContentPart, EmbedRequest, MultimodalDocument
from inferd.api.errors import classify, item_error
from inferd.api.openai.embed_convert import check_format, vector
from inferd.errors import CapabilityMissing, InferdError, InvalidInput
from inferd.media.sources import MediaRef, inline_ref, parse_ref
from inferd.service import EmbedResult, RerankResult


def _part_ref(p: ContentPart, where: str) -> MediaRef:
    """An image part -> its media reference (parsed, not fetched)."""
    if p.type == "image_url":
        url = (p.image_url or {}).get("url")
        return parse_ref(url, f"{where}.image_url.url")
    return inline_ref(p.data or "", p.mime_type, f"{where}.data")


def _item(parts: list[ContentPart], where: str) -> str | MediaRef:
    """One input: its text (text parts joined) or its one image. An input mixing text and
    images has no single vector; each must be its own input."""
    images = [p for p in parts if p.type != "text"]
    if not images:
        return "\n".join(p.text or "" for p in parts)
    if len(parts) > 1:
        raise InvalidInput(f"{where} mixes {len(parts)} parts; give each text or image as its own input", where)
    return _part_ref(images[0], where)


def embed_inputs(req: EmbedRequest) -> list[str | MediaRef | InferdError]:
    """Texts and image references in order; an item that cannot be served (a malformed image
    reference) is its error, so that error_policy decides whether it fails the request or
    only itself."""
    items = [req.input] if isinstance(req.input, str) else req.input
    out: list[str | MediaRef | InferdError] = []
    for i, x in enumerate(items):
        try:
            if isinstance(x, str):
                out.append(x)
            else:
                out.append(_item(x if isinstance(x, list) else [x], f"input[{i}]"))
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


def multimodal_parts(docs: list[MultimodalDocument]) -> list[list[str | MediaRef]]:
    """Each document as its parts: texts (as given) and image references."""
    out: list[list[str | MediaRef]] = []
    for i, d in enumerate(docs):
        if d.content is None:
            raise InvalidInput(f"documents[{i}].content is required", f"documents[{i}].content")
        if isinstance(d.content, str):
            out.append([d.content])
            continue
        out.append([p.text or "" if p.type == "text" else _part_ref(p, f"documents[{i}].content[{j}]")
                    for j, p in enumerate(d.content)])
    return out


def rerank_response(r: RerankResult) -> dict[str, Any]:
    return {"object": "list", "model": r.model,
            "data": [{"object": "rerank.score", "index": i, "score": s} for i, s in enumerate(r.scores)],
            "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": 0, "total_tokens": r.prompt_tokens,
                      "cached_prompt_tokens": 0}}
