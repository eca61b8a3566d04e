"""Generation control routes (OpenAI-family error envelope): /stop, /set_lora, /unset_lora
(GenAIServer), and /tokenize, /detokenize (llama.cpp server / openai-server shapes).
`model` may be omitted when exactly one generator is served."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict

from inferd.api.deps import get_service
from inferd.errors import InvalidInput
from inferd.service import InferenceService

router = APIRouter()


class StopRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None


class SetLoraRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    name: str | None = None


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    content: str = ""
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[int] = []


def piece_of(b: bytes) -> str | list[int]:
    """A token's text, or its bytes when they are not valid UTF-8 alone (llama.cpp's shape)."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return list(b)


@router.post("/stop")
async def stop(body: StopRequest | None = None, svc: InferenceService = Depends(get_service)) -> dict:
    model = body.model if body else None
    return {"stopped": svc.stop_generation(model), "model": model}


@router.post("/set_lora")
async def set_lora(body: SetLoraRequest, svc: InferenceService = Depends(get_service)) -> dict:
    """Activate adapter `name` (a file or folder in the model's loras/); waits for the
    model's active requests. A missing name is a 400 (use /unset_lora for base weights)."""
    if body.name is None:
        raise InvalidInput("'name' is required (use /unset_lora to return to the base weights)", "name")
    spec, previous = await svc.set_lora(body.model, body.name)
    return {"model": spec.name, "lora": body.name, "previous": previous}


@router.post("/unset_lora")
async def unset_lora(body: StopRequest | None = None, svc: InferenceService = Depends(get_service)) -> dict:
    spec, previous = await svc.set_lora(body.model if body else None, None)
    return {"model": spec.name, "lora": None, "previous": previous}


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, svc: InferenceService = Depends(get_service)) -> dict:
    model, ids, pieces = await svc.tokenize(body.model, body.content, body.add_special, body.parse_special)
    tokens: list[Any] = [{"id": i, "piece": piece_of(p)} for i, p in zip(ids, pieces)] if body.with_pieces else ids
    return {"tokens": tokens, "model": model}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, svc: InferenceService = Depends(get_service)) -> dict:
    model, text = await svc.detokenize(body.model, body.tokens)
    return {"content": text, "model": model}
