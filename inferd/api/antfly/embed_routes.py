"""Antfly face: /ai/v1/embed, /ai/v1/embeddings, /ai/v1/rerank, /ai/v1/rerank_multimodal."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from inferd.api.fastjson import FastJSONResponse

from inferd.api.antfly import embed_convert as convert
from inferd.api.antfly.embed_schemas import EmbedRequest, MultimodalRerankRequest, RerankRequest
from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect
from inferd.service import InferenceService

router = APIRouter(prefix="/ai/v1")


@router.post("/embed")
@router.post("/embeddings")
async def embeddings(req: EmbedRequest, request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    per_item = req.error_policy == "per_item"
    r = await cancel_on_disconnect(request, svc.embed(req.model, convert.embed_inputs(req), task=convert.task_of(req),
                                                      dimensions=req.dimensions, per_item=per_item))
    return FastJSONResponse(convert.embeddings_response(r, r.items, req.encoding_format, per_item))


@router.post("/rerank")
async def rerank(req: RerankRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    r = await cancel_on_disconnect(request, svc.rerank(req.model, req.query, req.prompts, param="prompts"))
    return JSONResponse(convert.rerank_response(r))


@router.post("/rerank_multimodal")
async def rerank_multimodal(req: MultimodalRerankRequest, request: Request,
                            svc: InferenceService = Depends(get_service)) -> JSONResponse:
    spec = svc.multimodal_rerank_spec(req.model)  # unknown model: 404 before looking at documents
    docs = convert.multimodal_parts(req.documents)
    # Image (or mixed) documents need an image-capable embedder; text-only ones on a reranker keep its path.
    r = await cancel_on_disconnect(request, svc.rerank_multimodal(spec.name, req.query, docs))
    return JSONResponse(convert.rerank_response(r))
