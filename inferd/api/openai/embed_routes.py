"""OpenAI face: /v1/embeddings and /embeddings; /v1/rerank and /rerank."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from inferd.api.fastjson import FastJSONResponse

from inferd.api.deps import get_service
from inferd.api.openai import embed_convert as convert
from inferd.api.openai.embed_schemas import EmbeddingRequest, RerankRequest
from inferd.api.streaming import cancel_on_disconnect
from inferd.models import ModelKind
from inferd.service import InferenceService

router = APIRouter()


@router.post("/v1/embeddings")
@router.post("/embeddings")
async def embeddings(req: EmbeddingRequest, request: Request,
                     svc: InferenceService = Depends(get_service)) -> Response:
    convert.check_dense(svc.spec_for(req.model, ModelKind.EMBEDDER))  # before any model work
    work = svc.embed(req.model, convert.embed_inputs(req), dimensions=req.dimensions, truncate=req.truncate)
    r = await cancel_on_disconnect(request, work)  # a gone client's inputs are skipped by the batcher
    # orjson straight from the float32 arrays: FastAPI's encoder and json.dumps walk every
    # float of every vector as a Python object (slow).
    return FastJSONResponse(convert.embeddings_response(r, req.encoding_format))


@router.post("/v1/rerank")
@router.post("/rerank")
async def rerank(req: RerankRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    docs = convert.rerank_documents(req)
    r = await cancel_on_disconnect(request, svc.rerank(req.model, req.query, docs))
    return JSONResponse(convert.rerank_response(r, docs, req.top_n, req.return_documents,
                                                f"rerank-{uuid.uuid4().hex[:24]}"))
