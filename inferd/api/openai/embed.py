"""OpenAI face: /v1/embeddings and /embeddings; /v1/rerank and /rerank (the llama-server /
vLLM / Infinity shape). Sections: wire models, pure converters, thin routes."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, Literal
import uuid

from fastapi import APIRouter, Depends, Request
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from inferd.api.deps import get_service
from inferd.api.fastjson import FastJSONResponse
from inferd.api.streaming import cancel_on_disconnect
from inferd.errors import InvalidInput, ModelNotSupported
from inferd.media.sources import MediaRef, inline_ref, parse_ref
from inferd.models import ModelKind
from inferd.service import EmbedResult, InferenceService, RerankResult


# ---- wire requests -------------------------------------------------------------------
# A string, a list of strings, token ids, or a list of token-id lists (as OpenAI accepts).
EmbeddingInput = str | list[str] | list[int] | list[list[int]]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    input: EmbeddingInput
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    # OpenAI answers an over-long input with a 400; `truncate: true` (llama-server, vLLM,
    # Infinity) opts into keeping its first tokens instead.
    truncate: bool = False


class RerankDocument(BaseModel):
    """`{"text": ...}`, or (Jina's multimodal rerank shape) `{"image": ...}`: a data URI, a
    `file-...` id, an http(s) URL or bare base64."""

    model_config = ConfigDict(extra="ignore")
    text: str | None = None
    image: str | None = None


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    query: str
    documents: list[str | RerankDocument] = Field(max_length=10_000)
    top_n: int | None = Field(None, ge=0)
    return_documents: bool = False

# ---- wire <-> engine (pure functions) ------------------------------------------------
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


def rerank_documents(req: RerankRequest) -> list[str | MediaRef]:
    """Each document's text, or its image reference (parsed, not fetched)."""
    out: list[str | MediaRef] = []
    for i, d in enumerate(req.documents):
        if isinstance(d, str):
            out.append(d)
        elif (d.text is None) == (d.image is None):
            raise InvalidInput(f"documents[{i}] needs exactly one of 'text' and 'image'", f"documents[{i}]")
        elif d.text is not None:
            out.append(d.text)
        else:
            where = f"documents[{i}].image"
            img = str(d.image).strip()
            out.append(parse_ref(img, where) if img.startswith(("data:", "file-", "http://", "https://"))
                       else inline_ref(img, None, where))
    return out


def echoed(req: RerankRequest) -> list[dict[str, str]]:
    """`return_documents`: each document as it was sent."""
    return [{"text": d} if isinstance(d, str) else {"image": d.image} if d.image is not None
            else {"text": d.text or ""} for d in req.documents]


def rerank_response(r: RerankResult, docs: Sequence[dict[str, str]], top_n: int | None, return_documents: bool,
                    request_id: str) -> dict[str, Any]:
    order = sorted(range(len(r.scores)), key=lambda i: -r.scores[i])
    if top_n is not None:
        order = order[:top_n]
    results = []
    for i in order:
        item: dict[str, Any] = {"index": i, "relevance_score": r.scores[i]}
        if return_documents:
            item["document"] = docs[i]
        results.append(item)
    return {"id": request_id, "object": "list", "model": r.model, "results": results,
            "usage": {"prompt_tokens": r.prompt_tokens, "total_tokens": r.prompt_tokens}}

# ---- routes --------------------------------------------------------------------------
router = APIRouter()


@router.post("/v1/embeddings")
@router.post("/embeddings")
async def embeddings(req: EmbeddingRequest, request: Request,
                     svc: InferenceService = Depends(get_service)) -> Response:
    """Also answered, framework-free, by api/fast_lane.py (the same function, called there)."""
    check_dense(svc.spec_for(req.model, ModelKind.EMBEDDER))  # before any model work
    work = svc.embed(req.model, embed_inputs(req), dimensions=req.dimensions, truncate=req.truncate)
    r = await cancel_on_disconnect(request, work)  # a gone client's inputs are skipped by the batcher
    # orjson straight from the float32 arrays: FastAPI's encoder and json.dumps walk every
    # float of every vector as a Python object (slow).
    return FastJSONResponse(embeddings_response(r, req.encoding_format))


@router.post("/v1/rerank")
@router.post("/rerank")
async def rerank(req: RerankRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    docs = rerank_documents(req)
    if any(isinstance(d, MediaRef) for d in docs):
        # image documents: the multimodal path (a ColPali-style reranker's MaxSim, or a CLIP
        # embedder's cosine), as /ai/v1/rerank_multimodal; a text reranker answers 400 there
        spec = svc.multimodal_rerank_spec(req.model)
        work = svc.rerank_multimodal(spec.name, req.query, [[d] for d in docs])
    else:
        work = svc.rerank(req.model, req.query, [d for d in docs if isinstance(d, str)])
    r = await cancel_on_disconnect(request, work)
    return JSONResponse(rerank_response(r, echoed(req), req.top_n, req.return_documents,
                                        f"rerank-{uuid.uuid4().hex[:24]}"))
