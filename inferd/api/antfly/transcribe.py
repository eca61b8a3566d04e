"""Antfly face, speech: POST /ai/v1/transcribe {model, audio: base64 or a file-... id, language?}
-> {object: "list", data: [{object: "transcription", index, text, language}], model, usage}."""

from __future__ import annotations

import base64
import binascii
import re

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict
from starlette.responses import JSONResponse

from inferd.api.deps import get_service
from inferd.api.openai.audio import language_of
from inferd.api.streaming import cancel_on_disconnect
from inferd.errors import InvalidInput, PayloadTooLarge
from inferd.service import InferenceService
from inferd.service.speech import TranscribeRequest, Transcription

router = APIRouter(prefix="/ai/v1")
_DATA_URI = re.compile(r"^data:[\w.+-]+/[\w.+-]+(;[\w=.+-]+)*;base64,", re.I)


class TranscribeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    audio: str
    language: str | None = None


def audio_bytes(text: str, limit: int) -> bytes:
    """Base64 (or a base64 data: URI) -> bytes; refused by size before it is decoded."""
    text = _DATA_URI.sub("", text.strip(), count=1)
    if len(text) // 4 * 3 > limit + 3:
        raise PayloadTooLarge(f"the audio is larger than {limit} bytes, the most per request")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("'audio' is not valid base64", "audio") from None
    if not data:
        raise InvalidInput("'audio' is empty", "audio")
    return data


def response(t: Transcription) -> dict:
    return {"object": "list", "model": t.model,
            "data": [{"object": "transcription", "index": 0, "text": t.text, "language": t.language}],
            "usage": {"prompt_tokens": 0, "completion_tokens": t.tokens, "total_tokens": t.tokens,
                      "cached_prompt_tokens": 0}}


@router.post("/transcribe")
async def transcribe(body: TranscribeBody, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    svc.transcriber_spec(body.model)  # unknown model: 404 before the audio is looked at
    limit = svc.settings.max_audio_bytes
    ref = body.audio.strip()
    # "-" is not in the base64 alphabet: a file id can never be mistaken for audio bytes.
    audio = await svc.read_audio_file(ref, limit, "audio") if ref.startswith("file-") else audio_bytes(ref, limit)
    req = TranscribeRequest(model=body.model, audio=audio, language=language_of(body.language))
    return JSONResponse(response(await cancel_on_disconnect(request, svc.transcribe(req))))
