"""OpenAI face, text to speech: POST /v1/audio/speech (and /audio/speech).

JSON body as OpenAI's: `model`, `input`, `voice`, `response_format` (mp3 default, opus,
aac, flac, wav, pcm), `speed` (0.25-4), `instructions` (accepted, a Piper voice ignores
them) and `stream_format`:
- absent: the whole file in one response (with its length);
- `audio`: the file's bytes with chunked transfer, as each sentence is synthesised;
- `sse`: `speech.audio.delta` events ({"type", "audio": base64 of the next bytes of the
  file}) and one `speech.audio.done` ({"type", "usage"}); a failure after the stream started
  is an error event instead of the done event.
Wire <-> engine in pure functions; the route only reads the body and writes the answer."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from inferd.api.deps import get_service
from inferd.api.streaming import ClosingStream, cancel_on_disconnect, sse_response
from inferd.errors import InvalidInput
from inferd.media.audio_out import FORMATS, MEDIA_TYPES, Encoder, encode, output_rate
from inferd.service import InferenceService, SpeakRequest, SpeechStream

log = logging.getLogger("inferd.api")

STREAM_FORMATS = ("audio", "sse")


class SpeechBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    input: str
    voice: str | None = None
    response_format: str = "mp3"
    speed: float = 1.0
    instructions: str | None = None
    stream_format: str | None = None


# ---- wire <-> engine (pure functions) ------------------------------------------------
def speak_request(body: SpeechBody) -> tuple[SpeakRequest, str, str | None]:
    """-> (engine request, response_format, stream_format or None for one whole file)."""
    fmt = body.response_format.strip().lower()
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown response_format '{body.response_format}' (use one of {', '.join(FORMATS)})",
                           "response_format")
    stream = body.stream_format.strip().lower() if body.stream_format is not None else None
    if stream is not None and stream not in STREAM_FORMATS:
        raise InvalidInput(f"unknown stream_format '{body.stream_format}' (use audio or sse)", "stream_format")
    voice = body.voice.strip() if body.voice and body.voice.strip() else None
    return (SpeakRequest(model=(body.model or "").strip() or None, input=body.input, voice=voice, speed=body.speed,
                         instructions=body.instructions), fmt, stream)


def usage(stream: SpeechStream) -> dict[str, Any]:
    """The done event's usage: the voice's input tokens are its phoneme ids; it makes no output
    tokens (VITS decodes audio frames, not tokens), so the audio is counted in seconds."""
    u = stream.usage
    return {"input_tokens": u.phoneme_ids, "output_tokens": 0, "total_tokens": u.phoneme_ids,
            "input_characters": u.characters, "audio_seconds": round(u.seconds(stream.sample_rate), 3)}


def delta_event(chunk: bytes) -> dict[str, Any]:
    return {"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode("ascii")}


def done_event(stream: SpeechStream) -> dict[str, Any]:
    return {"type": "speech.audio.done", "usage": usage(stream)}


async def encoded(stream: SpeechStream, fmt: str) -> AsyncIterator[bytes]:
    """The file's bytes as each sentence is synthesised and encoded (encoding on a thread)."""
    enc = Encoder(fmt, stream.sample_rate, streaming=True)
    try:
        async for audio in stream.sentences():
            chunk = await asyncio.to_thread(enc.feed, audio)
            if chunk:
                yield chunk
        tail = await asyncio.to_thread(enc.finish)
        if tail:
            yield tail
    finally:
        enc.close()


# ---- routes --------------------------------------------------------------------------
router = APIRouter()


@router.post("/v1/audio/speech")
@router.post("/audio/speech")
async def speech(body: SpeechBody, request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    req, fmt, stream_format = speak_request(body)
    if stream_format is None:
        audio, stream = await cancel_on_disconnect(request, svc.speak(req))
        data = await asyncio.to_thread(encode, audio, stream.sample_rate, fmt)
        return Response(data, media_type=MEDIA_TYPES[fmt], headers=_headers(stream, fmt))
    stream = await cancel_on_disconnect(request, svc.open_speech(req))  # request errors: before any byte
    if stream_format == "sse":
        async def frames() -> AsyncIterator[dict[str, Any]]:
            async for chunk in encoded(stream, fmt):
                yield delta_event(chunk)
            yield done_event(stream)

        return sse_response(frames(), stream.aclose, done=False)
    return ClosingStream(_logged(encoded(stream, fmt)), stream.aclose, MEDIA_TYPES[fmt], _headers(stream, fmt))


def _headers(stream: SpeechStream, fmt: str) -> dict[str, str]:
    """The sample rate of the audio sent (pcm has no header to say it)."""
    return {"X-Sample-Rate": str(output_rate(fmt, stream.sample_rate))}


async def _logged(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A raw audio stream has no way to report a failure after its first byte: it ends short,
    and the failure is logged."""
    try:
        async for c in chunks:
            yield c
    except Exception:
        log.exception("speech stream failed")
