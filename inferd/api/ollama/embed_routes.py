"""Ollama face: /api/embed and the legacy /api/embeddings."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from inferd.api.fastjson import FastJSONResponse

from inferd.api.deps import get_service
from inferd.api.ollama import embed_convert as convert
from inferd.api.ollama.convert import keep_alive
from inferd.api.ollama.embed_schemas import EmbedRequest, LegacyEmbeddingsRequest
from inferd.api.streaming import cancel_on_disconnect
from inferd.models import ModelKind
from inferd.service import InferenceService

router = APIRouter(prefix="/api")


@router.post("/embed")
async def embed(req: EmbedRequest, request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    t0 = time.perf_counter_ns()
    inputs = [req.input] if isinstance(req.input, str) else req.input
    r = await cancel_on_disconnect(request, svc.embed(req.model, inputs, dimensions=req.dimensions,
                                                      truncate=req.truncate, keep_alive=keep_alive(req.keep_alive)))
    return FastJSONResponse(convert.embed_response(r, time.perf_counter_ns() - t0, int(r.load_seconds * 1e9)))


@router.post("/embeddings")
async def embeddings(req: LegacyEmbeddingsRequest, request: Request,
                     svc: InferenceService = Depends(get_service)) -> Response:
    if not req.prompt:  # Ollama answers an empty prompt with an empty vector
        svc.resolve(req.model, ModelKind.EMBEDDER)
        return JSONResponse({"embedding": []})
    r = await cancel_on_disconnect(request, svc.embed(req.model, [req.prompt], keep_alive=keep_alive(req.keep_alive)))
    return FastJSONResponse(convert.legacy_response(r))
