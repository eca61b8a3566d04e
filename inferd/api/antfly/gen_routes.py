"""Antfly face, generation: /ai/v1/generate, /ai/v1/chat/completions, /ai/v1/generate/batch.
A failure after a stream started is an `event: error` frame, and no [DONE]."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.api.antfly import gen_convert as convert
from inferd.api.antfly.gen_schemas import BatchRequest, GenerateBody
from inferd.api.deps import get_service
from inferd.api.openai import gen_convert as oai
from inferd.api.streaming import cancel_on_disconnect, sse_response
from inferd.service import InferenceService

router = APIRouter(prefix="/ai/v1")


@router.post("/generate")
@router.post("/chat/completions")
async def generate(body: GenerateBody, request: Request, svc: InferenceService = Depends(get_service)):
    req = oai.chat_request(body)
    if req.stream:
        stream = await cancel_on_disconnect(request, svc.open_generation(req))
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(oai.chat_chunks(stream, usage, antfly=True), stream.aclose, "antfly")
    return oai.chat_response(await cancel_on_disconnect(request, svc.generate(req)), antfly=True)


@router.post("/generate/batch")
async def generate_batch(body: BatchRequest, request: Request, svc: InferenceService = Depends(get_service)) -> dict:
    results = await cancel_on_disconnect(request, svc.generate_batch(convert.batch_requests(body)))
    return convert.batch_response(body, results)
