"""OpenAI (and GenAIServer) audio wire <-> engine: multipart form fields -> TranscribeRequest,
Transcription -> json | text | srt | vtt | verbose_json, and the stream's event objects.
Pure functions: the route reads the form and the file, these only look at values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from inferd.errors import InvalidInput
from inferd.runtimes.speech.types import Segment
from inferd.service.speech import TranscribeRequest, Transcription

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
    return {"id": i, "seek": s.seek, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
            "tokens": s.tokens, "temperature": s.temperature, "avg_logprob": round(s.avg_logprob, 6),
            "compression_ratio": round(s.compression_ratio, 6), "no_speech_prob": round(s.no_speech_prob, 6)}


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


def delta_event(text: str) -> dict[str, Any]:
    return {"type": "transcript.text.delta", "delta": text}


def done_event(t: Transcription) -> dict[str, Any]:
    return {"type": "transcript.text.done", "text": t.text, "language": t.language,
            "language_probability": round(t.language_probability, 6), "duration": round(t.duration, 3),
            "usage": {"type": "tokens", "input_tokens": 0, "output_tokens": t.tokens, "total_tokens": t.tokens}}
