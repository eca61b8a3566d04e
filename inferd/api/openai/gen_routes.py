"""OpenAI face, generation: /v1/chat/completions, /v1/completions (and the unversioned
aliases llama-server clients use)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.api.deps import get_service
from inferd.api.openai import gen_convert as convert
from inferd.api.openai.gen_schemas import ChatCompletionRequest, CompletionRequest
from inferd.api.streaming import cancel_on_disconnect, sse_response
from inferd.service import InferenceService

router = APIRouter()


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request,
                           svc: InferenceService = Depends(get_service)):
    req = convert.chat_request(body)
    if req.stream:
        stream = await cancel_on_disconnect(request, svc.open_generation(req))
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(convert.chat_chunks(stream, usage), stream.aclose, "openai")
    return convert.chat_response(await cancel_on_disconnect(request, svc.generate(req)))


@router.post("/v1/completions")
@router.post("/completions")
async def completions(body: CompletionRequest, request: Request, svc: InferenceService = Depends(get_service)):
    req = convert.completion_request(body)
    echo = convert.echo_text(body)
    if req.stream:
        stream = await cancel_on_disconnect(request, svc.open_generation(req))
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(convert.completion_chunks(stream, usage, echo), stream.aclose, "openai")
    return convert.completion_response(await cancel_on_disconnect(request, svc.generate(req)), echo)
