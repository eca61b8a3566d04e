"""Antfly face: /ai/v1/embed, /ai/v1/embeddings, /ai/v1/rerank, /ai/v1/rerank_multimodal.
Sections: wire models, pure converters, thin routes."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.responses import JSONResponse, Response

from inferd.api.deps import get_service
from inferd.api.errors import classify, item_error
from inferd.api.fastjson import FastJSONResponse
from inferd.api.openai.embed import check_format, vector
from inferd.api.streaming import cancel_on_disconnect
from inferd.errors import CapabilityMissing, InferdError, InvalidInput
from inferd.media.sources import MediaRef, inline_ref, parse_ref
from inferd.service import EmbedResult, InferenceService, RerankResult


# ---- wire requests -------------------------------------------------------------------
class ContentPart(BaseModel):
    """{type: text, text} | {type: image_url, image_url: {url}} | {type: media, data, mime_type}."""
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "image_url", "media"]
    text: str | None = None
    image_url: dict[str, Any] | None = None
    data: str | None = None
    mime_type: str | None = None


class EmbedRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    input: str | list[str | ContentPart | list[ContentPart]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    task_type: str | None = None
    input_type: str | None = None  # deprecated alias of task_type
    error_policy: Literal["fail_fast", "per_item"] = "fail_fast"

    @field_validator("dimensions", mode="before")
    @classmethod
    def _zero_is_unset(cls, v: Any) -> Any:
        # The spec's example sends `dimensions: 0`: Go clients send a struct's zero value for
        # a field they did not set, so 0 is "the model's own size", as if omitted.
        return None if v == 0 and not isinstance(v, bool) else v


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    query: str
    prompts: list[str] = Field(max_length=10_000)


class MultimodalDocument(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str | None = None
    content: str | list[ContentPart] | None = None


class MultimodalRerankRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    query: str
    documents: list[MultimodalDocument] = Field(max_length=10_000)

# ---- wire <-> engine (pure functions) ------------------------------------------------
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


def _item_error(index: int, e: InferdError, parsed: bool = True) -> dict[str, Any]:
    # parse: the item itself could not be read (a malformed image reference or data URI);
    # validate: it was read but the model cannot take it; inference: the run failed.
    stage = ("parse" if not parsed else
             "validate" if isinstance(e, (InvalidInput, CapabilityMissing)) else "inference")
    return {"index": index, **item_error(e), "stage": stage, "status": classify(e)[0]}


def embeddings_response(r: EmbedResult, items: list[Any], encoding_format: str, per_item: bool,
                        unparsed: frozenset[int] = frozenset()) -> dict[str, Any]:
    """`unparsed`: the indexes whose item failed to parse (embed_inputs' errors)."""
    check_format(r.sparse, encoding_format)
    data, errors = [], []
    for i, v in enumerate(items):
        if isinstance(v, InferdError):
            errors.append(_item_error(i, v, parsed=i not in unparsed))
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


def rerank_response(r: RerankResult, ids: list[str | None] | None = None) -> dict[str, Any]:
    """`ids`: rerank_multimodal's documents[].id, echoed on each score that has one (the
    spec's score shape has only `index`; the id saves the client a lookup)."""
    data: list[dict[str, Any]] = [{"object": "rerank.score", "index": i, "score": s} for i, s in enumerate(r.scores)]
    for d, doc_id in zip(data, ids or []):
        if doc_id is not None:
            d["id"] = doc_id
    return {"object": "list", "model": r.model, "data": data,
            "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": 0, "total_tokens": r.prompt_tokens,
                      "cached_prompt_tokens": 0}}

# ---- routes --------------------------------------------------------------------------
router = APIRouter(prefix="/ai/v1")


@router.post("/embed")
@router.post("/embeddings")
async def embeddings(req: EmbedRequest, request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    per_item = req.error_policy == "per_item"
    inputs = embed_inputs(req)
    unparsed = frozenset(i for i, x in enumerate(inputs) if isinstance(x, InferdError))
    r = await cancel_on_disconnect(request, svc.embed(req.model, inputs, task=task_of(req),
                                                      dimensions=req.dimensions, per_item=per_item))
    return FastJSONResponse(embeddings_response(r, r.items, req.encoding_format, per_item, unparsed))


@router.post("/rerank")
async def rerank(req: RerankRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    r = await cancel_on_disconnect(request, svc.rerank(req.model, req.query, req.prompts, param="prompts"))
    return JSONResponse(rerank_response(r))


@router.post("/rerank_multimodal")
async def rerank_multimodal(req: MultimodalRerankRequest, request: Request,
                            svc: InferenceService = Depends(get_service)) -> JSONResponse:
    spec = svc.multimodal_rerank_spec(req.model)  # unknown model: 404 before looking at documents
    docs = multimodal_parts(req.documents)
    # Image (or mixed) documents need an image-capable embedder; text-only ones on a reranker keep its path.
    r = await cancel_on_disconnect(request, svc.rerank_multimodal(spec.name, req.query, docs))
    return JSONResponse(rerank_response(r, [d.id for d in req.documents]))
