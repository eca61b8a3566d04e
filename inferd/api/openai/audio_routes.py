"""OpenAI / GenAIServer face, speech: POST /v1/audio/transcriptions and /v1/audio/translations
(and the /audio/... aliases): multipart `file` + form fields. stream=true answers with SSE
`transcript.text.delta` events as windows are decoded, one `transcript.text.done`, then
`data: [DONE]`; a failure after the stream started is an error event instead of [DONE]."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.datastructures import UploadFile
from starlette.responses import JSONResponse, PlainTextResponse, Response

from inferd.api.deps import get_service
from inferd.api.openai import audio_convert as convert
from inferd.api.streaming import cancel_on_disconnect, sse_response
from inferd.errors import InvalidInput, PayloadTooLarge
from inferd.service import InferenceService

router = APIRouter()


@router.post("/v1/audio/transcriptions")
@router.post("/audio/transcriptions")
async def transcriptions(request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    return await _audio(request, svc, "transcribe")


@router.post("/v1/audio/translations")
@router.post("/audio/translations")
async def translations(request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    return await _audio(request, svc, "translate")  # Whisper's translate task: always English


async def _audio(request: Request, svc: InferenceService, task: str) -> Response:
    form = await request.form(max_files=1, max_fields=64)
    try:
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        granularities = [g for k in ("timestamp_granularities[]", "timestamp_granularities")
                         for g in form.getlist(k) if isinstance(g, str)]
        audio = await _read_file(form.get("file"), svc.settings.max_audio_bytes)
    finally:
        await form.close()
    req, fmt, stream = convert.transcribe_request(fields, granularities, audio, task)
    if stream:
        return await _stream(svc, req)
    t = await cancel_on_disconnect(request, svc.speech.transcribe(req))  # a gone client's windows are dropped
    if fmt == "text":
        return PlainTextResponse(t.text + "\n")
    if fmt == "srt":
        return PlainTextResponse(convert.srt(t))
    if fmt == "vtt":
        return PlainTextResponse(convert.vtt(t), media_type="text/vtt")
    if fmt == "verbose_json":
        return JSONResponse(convert.verbose_body(t, req.word_timestamps))
    return JSONResponse(convert.json_body(t))


async def _read_file(item: Any, limit: int) -> bytes:
    if item is None:
        raise InvalidInput("'file' is required: a multipart audio file", "file")
    if not isinstance(item, UploadFile):
        raise InvalidInput("'file' must be an uploaded audio file (multipart), not a text field", "file")
    if item.size is not None and item.size > limit:  # refused before reading it
        raise PayloadTooLarge(f"the audio file is {item.size} bytes; at most {limit} bytes per request")
    data = await item.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"the audio file is larger than {limit} bytes, the most per request")
    return data


async def _stream(svc: InferenceService, req) -> Response:
    stream = await svc.speech.open(req)  # request errors are a normal error response, before any byte

    async def frames():
        first = True
        async for segments in stream.windows():
            for s in segments:
                text = s.text.lstrip() if first else s.text
                if text:
                    first = False
                    yield convert.delta_event(text)
        yield convert.done_event(stream.result())

    return sse_response(frames(), stream.aclose)
