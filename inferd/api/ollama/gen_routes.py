"""Ollama face, generation: /api/chat and /api/generate (NDJSON streams by default)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from inferd.api.deps import get_service
from inferd.api.ollama import defaults
from inferd.api.ollama import gen_convert as convert
from inferd.api.ollama.convert import keep_alive
from inferd.api.ollama.gen_schemas import ChatRequest, GenerateRequest
from inferd.api.streaming import generate_or_stream, ndjson_response
from inferd.service import InferenceService

router = APIRouter(prefix="/api")


async def _load_only(svc: InferenceService, body: ChatRequest | GenerateRequest, chat: bool) -> dict:
    """A request with nothing to generate loads the model (or, with keep_alive 0, unloads it)."""
    ka = keep_alive(body.keep_alive)
    spec = await svc.load_generator(body.model, ka)
    return convert.load_response(spec.name, chat=chat, unloaded=ka == 0)


@router.post("/chat")
async def chat(body: ChatRequest, request: Request, svc: InferenceService = Depends(get_service)):
    if convert.is_load_only(None, body.messages):
        return await _load_only(svc, body, chat=True)
    defaults.apply(svc.lookup(body.model), body)
    return await generate_or_stream(request, svc, convert.chat_request(body),
                                    stream=lambda s: ndjson_response(convert.chat_chunks(s), s.aclose),
                                    respond=convert.chat_response)


@router.post("/generate")
async def generate(body: GenerateRequest, request: Request, svc: InferenceService = Depends(get_service)):
    if convert.is_load_only(body.prompt, None, body.context) and not body.images:
        return await _load_only(svc, body, chat=False)
    defaults.apply(svc.lookup(body.model), body)
    return await generate_or_stream(request, svc, convert.generate_request(body),
                                    stream=lambda s: ndjson_response(convert.generate_chunks(s), s.aclose),
                                    respond=convert.generate_response)
