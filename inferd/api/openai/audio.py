"""OpenAI (and GenAIServer) audio wire <-> engine: multipart form fields -> TranscribeRequest,
Transcription -> json | text | srt | vtt | verbose_json, and the stream's event objects.
Pure functions: the route reads the form and the file, these only look at values.

OpenAI / GenAIServer face, speech: POST /v1/audio/transcriptions and /v1/audio/translations
(and the /audio/... aliases): multipart `file` + form fields. stream=true answers with SSE
`transcript.text.delta` events as windows are decoded, one `transcript.text.done`, then
`data: [DONE]`; a failure after the stream started is an error event instead of [DONE]."""

from __future__ import annotations

from collections.abc import Mapping
import re
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.datastructures import UploadFile
from starlette.responses import JSONResponse, PlainTextResponse, Response

from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect, sse_response
from inferd.errors import InvalidInput, PayloadTooLarge
from inferd.speech_types import Segment
from inferd.service import InferenceService
from inferd.service.speech import TranscribeRequest, Transcription


# ---- wire <-> engine (pure functions) ------------------------------------------------
FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("word", "segment")
_LANGUAGE = re.compile(r"^[a-z]{2,3}$")
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off", ""}


def _bool(value: str | None, name: str, default: bool) -> bool:
    if value is None:
        return default
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidInput(f"'{name}' must be true or false, not {value!r}", name)


def _number(value: str | None, name: str, cast: type, default: Any) -> Any:
    if value is None or value.strip() == "":
        return default
    try:
        return cast(value)
    except ValueError:
        raise InvalidInput(f"'{name}' must be a number, not {value!r}", name) from None


def language_of(value: str | None) -> str | None:
    """An ISO 639-1 code, or None for detection (`auto`, empty, absent)."""
    if value is None or value.strip().lower() in ("", "auto"):
        return None
    v = value.strip().lower()
    if not _LANGUAGE.match(v):
        raise InvalidInput(f"'language' must be an ISO 639-1 code such as 'en', or 'auto', not {value!r}", "language")
    return v


def transcribe_request(fields: Mapping[str, str], granularities: list[str], audio: bytes,
                       task: str) -> tuple[TranscribeRequest, str, bool]:
    """-> (engine request, response_format, stream)."""
    fmt = (fields.get("response_format") or "json").strip()
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown response_format '{fmt}' (use one of {', '.join(FORMATS)})", "response_format")
    for g in granularities:
        if g not in GRANULARITIES:
            raise InvalidInput(f"unknown timestamp granularity '{g}' (use word or segment)", "timestamp_granularities")
    stream = _bool(fields.get("stream"), "stream", False)
    if stream and fmt not in ("json", "text"):
        raise InvalidInput(f"stream=true sends text events; response_format '{fmt}' cannot be streamed",
                           "response_format")
    if granularities and fmt != "verbose_json":  # OpenAI's rule: only verbose_json carries them
        raise InvalidInput("timestamp_granularities[] needs response_format verbose_json", "timestamp_granularities")
    words = "word" in granularities
    req = TranscribeRequest(
        model=(fields.get("model") or "").strip() or None, audio=audio, task=task,
        language=language_of(fields.get("language")), prompt=fields.get("prompt") or None,
        temperature=_number(fields.get("temperature"), "temperature", float, None),
        temperature_fallback=_bool(fields.get("temperature_fallback"), "temperature_fallback", True),
        beam_size=_number(fields.get("beam_size"), "beam_size", int, 5),
        timestamps=fmt in ("srt", "vtt", "verbose_json"), word_timestamps=words)
    return req, fmt, stream


# ---- responses ------------------------------------------------------------------------------
def json_body(t: Transcription) -> dict[str, Any]:
    """OpenAI's `json` plus what GenAIServer adds: the detected language and its probability."""
    return {"text": t.text, "language": t.language, "language_probability": round(t.language_probability, 6),
            "duration": round(t.duration, 3), "usage": {"type": "duration", "seconds": round(t.duration, 3)}}


def verbose_body(t: Transcription, words: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": t.task, "language": t.language, "language_probability": round(t.language_probability, 6),
        "duration": round(t.duration, 3), "text": t.text, "segments": [_segment(i, s) for i, s in enumerate(t.segments)],
        "usage": {"type": "duration", "seconds": round(t.duration, 3)}}
    if words:
        body["words"] = [{"word": w.word.strip(), "start": round(w.start, 3), "end": round(w.end, 3),
                          "probability": round(w.probability, 6)} for s in t.segments for w in s.words or []]
    return body


def _segment(i: int, s: Segment) -> dict[str, Any]:
    out = {"id": i, "seek": s.seek, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
           "tokens": s.tokens, "temperature": s.temperature, "avg_logprob": round(s.avg_logprob, 6),
           "compression_ratio": round(s.compression_ratio, 6), "no_speech_prob": round(s.no_speech_prob, 6)}
    if s.confidence is not None:  # GenAIServer's ASR confidence probe, when the model gives one
        out["confidence"] = round(s.confidence, 6)
    return out


def _stamp(seconds: float, sep: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def srt(t: Transcription) -> str:
    return "".join(f"{i}\n{_stamp(s.start, ',')} --> {_stamp(s.end, ',')}\n{s.text.strip()}\n\n"
                   for i, s in enumerate(t.segments, 1))


def vtt(t: Transcription) -> str:
    return "WEBVTT\n\n" + "".join(f"{_stamp(s.start, '.')} --> {_stamp(s.end, '.')}\n{s.text.strip()}\n\n"
                                  for s in t.segments)


def delta_event(text: str, timing: dict[str, float] | None = None, confidence: float | None = None) -> dict[str, Any]:
    """`timing`: GenAIServer's stream extensions (ttft once, then tps), see `_Clock`."""
    out: dict[str, Any] = {"type": "transcript.text.delta", "delta": text, **(timing or {})}
    if confidence is not None:
        out["confidence"] = round(confidence, 6)
    return out


def done_event(t: Transcription, timing: dict[str, float] | None = None) -> dict[str, Any]:
    return {"type": "transcript.text.done", "text": t.text, "language": t.language,
            "language_probability": round(t.language_probability, 6), "duration": round(t.duration, 3),
            "usage": {"type": "tokens", "input_tokens": 0, "output_tokens": t.tokens, "total_tokens": t.tokens},
            **(timing or {})}


class _Clock:
    """ttft (seconds from the request's stream opening to its first text) and tps (tokens
    decoded per second since then), as GenAIServer's audio streams send them."""

    def __init__(self) -> None:
        self.t0, self.t_first, self.tokens = time.perf_counter(), 0.0, 0

    def tick(self, tokens: int, first: bool) -> dict[str, float]:
        now = time.perf_counter()
        self.tokens += tokens
        if first:
            self.t_first = now
            return {"ttft": round(now - self.t0, 6), "tps": 0.0}
        return {"tps": round(self.tokens / max(now - self.t_first, 1e-6), 3)}

    def final(self) -> dict[str, float]:
        now = time.perf_counter()
        ttft = (self.t_first or now) - self.t0
        return {"ttft": round(ttft, 6), "tps": round(self.tokens / max(now - (self.t_first or now), 1e-6), 3)
                if self.t_first else 0.0}


# ---- routes --------------------------------------------------------------------------
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
        audio = await _read_file(svc, form.get("file") or form.get("file_id"), svc.settings.max_audio_bytes)
    finally:
        await form.close()
    req, fmt, stream = transcribe_request(fields, granularities, audio, task)
    if stream:
        return await _stream(svc, req)
    t = await cancel_on_disconnect(request, svc.transcribe(req))  # a gone client's windows are dropped
    if fmt == "text":
        return PlainTextResponse(t.text + "\n")
    if fmt == "srt":
        return PlainTextResponse(srt(t))
    if fmt == "vtt":
        return PlainTextResponse(vtt(t), media_type="text/vtt")
    if fmt == "verbose_json":
        return JSONResponse(verbose_body(t, req.word_timestamps))
    return JSONResponse(json_body(t))


async def _read_file(svc: InferenceService, item: Any, limit: int) -> bytes:
    """The audio of a form: an uploaded file, or a `file-...` id of one stored with /v1/files
    (in `file` or `file_id`)."""
    if item is None:
        raise InvalidInput("'file' is required: a multipart audio file or a file-... id from /v1/files", "file")
    if isinstance(item, str) and item.strip().startswith("file-"):
        return await svc.read_audio_file(item.strip(), limit, "file")
    if not isinstance(item, UploadFile):
        raise InvalidInput("'file' must be an uploaded audio file (multipart) or a file-... id, not other text",
                           "file")
    if item.size is not None and item.size > limit:  # refused before reading it
        raise PayloadTooLarge(f"the audio file is {item.size} bytes; at most {limit} bytes per request")
    data = await item.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"the audio file is larger than {limit} bytes, the most per request")
    return data


async def _stream(svc: InferenceService, req) -> Response:
    stream = await svc.open_transcription(req)  # request errors are a normal error response, before any byte

    clock = _Clock()

    async def frames():
        first = True
        async for segments in stream.windows():
            for s in segments:
                text = s.text.lstrip() if first else s.text
                if text:
                    yield delta_event(text, clock.tick(len(s.tokens), first), s.confidence)
                    first = False
        yield done_event(stream.result(), clock.final())

    return sse_response(frames(), stream.aclose)
