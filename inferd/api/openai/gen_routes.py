"""OpenAI face, generation: /v1/chat/completions, /v1/completions (and the unversioned
aliases llama-server clients use)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.api.deps import get_service
from inferd.api.openai import gen_convert as convert
from inferd.api.openai.gen_schemas import ChatCompletionRequest, CompletionRequest
from inferd.api.openai.dialect import OPENAI
from inferd.api.streaming import generate_or_stream, sse_response
from inferd.service import InferenceService

router = APIRouter()


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request,
                           svc: InferenceService = Depends(get_service)):
    usage = bool(body.stream_options and body.stream_options.include_usage)
    return await generate_or_stream(
        request, svc, convert.chat_request(body),
        stream=lambda s: sse_response(convert.chat_chunks(s, usage, OPENAI), s.aclose, OPENAI.name),
        respond=convert.chat_response)


@router.post("/v1/completions")
@router.post("/completions")
async def completions(body: CompletionRequest, request: Request, svc: InferenceService = Depends(get_service)):
    echo = convert.echo_text(body)
    usage = bool(body.stream_options and body.stream_options.include_usage)
    return await generate_or_stream(
        request, svc, convert.completion_request(body),
        stream=lambda s: sse_response(convert.completion_chunks(s, usage, echo), s.aclose, OPENAI.name),
        respond=lambda g: convert.completion_response(g, echo))
