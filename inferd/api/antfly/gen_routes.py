"""Antfly face, generation: /ai/v1/generate, /ai/v1/chat/completions, /ai/v1/generate/batch.
A failure after a stream started is an `event: error` frame, and no [DONE]."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.api.antfly import gen_convert as convert
from inferd.api.antfly.gen_schemas import BatchRequest, GenerateBody
from inferd.api.deps import get_service
from inferd.api.openai import gen_convert as oai
from inferd.api.openai.dialect import ANTFLY
from inferd.api.streaming import cancel_on_disconnect, generate_or_stream, sse_response
from inferd.service import InferenceService

router = APIRouter(prefix="/ai/v1")


@router.post("/generate")
@router.post("/chat/completions")
async def generate(body: GenerateBody, request: Request, svc: InferenceService = Depends(get_service)):
    usage = bool(body.stream_options and body.stream_options.include_usage)
    return await generate_or_stream(
        request, svc, convert.chat_request(body),
        stream=lambda s: sse_response(oai.chat_chunks(s, usage, ANTFLY), s.aclose, ANTFLY.name),
        respond=convert.chat_response)


@router.post("/generate/batch")
async def generate_batch(body: BatchRequest, request: Request, svc: InferenceService = Depends(get_service)) -> dict:
    results = await cancel_on_disconnect(request, svc.generate_batch(convert.batch_requests(body)))
    return convert.batch_response(body, results)
