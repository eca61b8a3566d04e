"""OpenAI Realtime wire (transcription sessions) <-> engine: client event JSON -> session
settings and audio, session events -> server event JSON. Pure functions.

Two dialects, as OpenAI's server speaks them: `beta` (the client sent `OpenAI-Beta:
realtime=v1`: `transcription_session.*` events, the flat session shape with
`input_audio_format` and `input_audio_transcription`, `conversation.item.created`) and `ga`
(`session.*` events, `session: {type: "transcription", audio: {input: {...}}}`,
`conversation.item.added` then `conversation.item.done`). Either dialect's update event and
session shape is understood in both; replies follow the dialect of the connection."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from inferd.api.errors import classify
from inferd.api.openai.audio import language_of
from inferd.errors import InferdError, InvalidInput, ModelNotFound, echo
from inferd.media.pcm import looks_like_container
from inferd.media.vad import VadConfig
from inferd.service.realtime import (INPUT_RATE, BufferEmpty, BufferFull, Cleared, Committed, Event, SessionConfig,
                                     SpeechStarted, SpeechStopped, TranscriptDelta, TranscriptDone, TranscriptFailed,
                                     new_id)
from inferd.service.speech import MAX_PROMPT_CHARS

CLIENT_EVENTS = ("transcription_session.update", "session.update", "input_audio_buffer.append",
                 "input_audio_buffer.commit", "input_audio_buffer.clear")
MAX_PADDING_MS = 10_000
MAX_SILENCE_MS = 10_000


class WireError(InvalidInput):
    """A client event the protocol cannot take; `code` is the error event's code."""

    def __init__(self, message: str, code: str, param: str | None = None):
        super().__init__(message, param)
        self.code = code


# ---- client events -----------------------------------------------------------------------------
def parse_event(data: str | bytes | None) -> dict[str, Any]:
    """The JSON object of a text frame; anything else is a WireError (the session goes on).
    Its type is checked apart (kind_of), so that an unknown one's error still names its event_id."""
    if data is None or isinstance(data, bytes):
        raise WireError("send client events as JSON text frames, not binary frames", "invalid_json")
    try:
        event = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise WireError(f"the event is not valid JSON: {echo(e)}", "invalid_json") from None
    if not isinstance(event, dict):
        raise WireError("a client event is a JSON object with a 'type'", "invalid_json")
    return event


def kind_of(event: dict[str, Any]) -> str:
    """The event's type, one this server handles."""
    kind = event.get("type")
    if kind not in CLIENT_EVENTS:
        raise WireError(f"unknown or unsupported event type {echo(kind)!r} in a transcription session "
                        f"(use one of {', '.join(CLIENT_EVENTS)})", "invalid_value", "type")
    return kind


def client_event_id(event: Any) -> str | None:
    eid = event.get("event_id") if isinstance(event, dict) else None
    return eid if isinstance(eid, str) else None


def audio_of(event: dict[str, Any]) -> bytes:
    """The PCM16 bytes of an input_audio_buffer.append."""
    audio = event.get("audio")
    if not isinstance(audio, str):
        raise WireError("'audio' is required: base64 of PCM16 mono little-endian audio at 24 kHz", "missing_required_parameter",
                        "audio")
    try:
        pcm = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("'audio' is not valid base64", "invalid_base64", "audio") from None
    container = looks_like_container(pcm)
    if container is not None:
        raise WireError(f"'audio' holds a {container} file; send raw PCM16 mono samples at 24 kHz "
                        "(input_audio_format pcm16 / audio/pcm), without a file header", "invalid_audio_format", "audio")
    return pcm


def _obj(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError(f"'{name}' must be an object", "invalid_type", name)
    return value


def _known(value: dict[str, Any], allowed: set[str], where: str) -> None:
    for k in value:
        if k not in allowed:
            raise WireError(f"unknown or unsupported parameter '{where}.{echo(k)}' in a transcription session",
                            "unknown_parameter", f"{where}.{k}")


def _transcription(value: Any, where: str, cfg: SessionConfig) -> SessionConfig:
    if value is None:  # transcription switched off: a transcription session always transcribes
        return cfg
    t = _obj(value, where)
    _known(t, {"model", "language", "prompt"}, where)
    changes: dict[str, Any] = {}
    if "model" in t:
        m = t["model"]
        if m is not None and (not isinstance(m, str) or not m.strip()):
            raise WireError(f"'{where}.model' must be the name of a served transcriber", "invalid_value", f"{where}.model")
        changes["model"] = m.strip() if m else None
    if "language" in t:
        lang = t["language"]
        if lang is not None and not isinstance(lang, str):
            raise WireError(f"'{where}.language' must be an ISO 639-1 code", "invalid_value", f"{where}.language")
        try:
            changes["language"] = language_of(lang)
        except InvalidInput as e:
            raise WireError(e.message, "invalid_value", f"{where}.language") from None
    if "prompt" in t:
        p = t["prompt"]
        if p is not None and (not isinstance(p, str) or len(p) > MAX_PROMPT_CHARS):
            raise WireError(f"'{where}.prompt' must be text of at most {MAX_PROMPT_CHARS} characters",
                            "invalid_value", f"{where}.prompt")
        changes["prompt"] = p or None
    return replace(cfg, **changes)


def _number(t: dict[str, Any], key: str, where: str, lo: float, hi: float, default: float) -> float:
    v = t.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise WireError(f"'{where}.{key}' must be a number from {lo:g} to {hi:g}", "invalid_value", f"{where}.{key}")
    return v


def _turn_detection(value: Any, where: str) -> VadConfig | None:
    if value is None:
        return None
    t = _obj(value, where)
    kind = t.get("type", "server_vad")
    if kind != "server_vad":
        raise WireError(f"turn detection {echo(kind)!r} is not supported; use server_vad or null", "invalid_value",
                        f"{where}.type")
    _known(t, {"type", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response",
               "interrupt_response", "idle_timeout_ms"}, where)  # the last three concern responses: no-ops here
    d = VadConfig()
    return VadConfig(threshold=_number(t, "threshold", where, 0.0, 1.0, d.threshold),
                     prefix_padding_ms=int(_number(t, "prefix_padding_ms", where, 0, MAX_PADDING_MS,
                                                   d.prefix_padding_ms)),
                     silence_duration_ms=int(_number(t, "silence_duration_ms", where, 1, MAX_SILENCE_MS,
                                                     d.silence_duration_ms)))


def _beta_format(value: Any) -> None:
    if value != "pcm16":
        raise WireError(f"input_audio_format {echo(value)!r} is not supported; use pcm16 (PCM16 mono at 24 kHz)",
                        "invalid_value", "session.input_audio_format")


def _ga_format(value: Any) -> None:
    f = _obj(value, "session.audio.input.format")
    if f.get("type", "audio/pcm") != "audio/pcm" or f.get("rate", INPUT_RATE) != INPUT_RATE:
        raise WireError(f"audio format {echo(json.dumps(f))} is not supported; use "
                        f"{{\"type\": \"audio/pcm\", \"rate\": {INPUT_RATE}}}", "invalid_value",
                        "session.audio.input.format")


_IGNORED = {"id", "object", "expires_at", "include", "client_secret"}  # echoed back by clients, or logprobs (not given)


def session_config(session: Any, cfg: SessionConfig) -> SessionConfig:
    """`cfg` with the fields an update names (either shape) changed; absent ones stay."""
    s = _obj(session, "session")
    if "type" in s or "audio" in s:  # the GA shape
        if s.get("type", "transcription") != "transcription":
            raise WireError("only transcription sessions are served (session.type 'transcription', "
                            "?intent=transcription)", "invalid_value", "session.type")
        _known(s, {"type", "audio"} | _IGNORED, "session")
        audio = _obj(s.get("audio") or {}, "session.audio")
        _known(audio, {"input"}, "session.audio")
        inp = _obj(audio.get("input") or {}, "session.audio.input")
        _known(inp, {"format", "transcription", "turn_detection", "noise_reduction"}, "session.audio.input")
        return _fields(cfg, inp, "session.audio.input", ("format", "transcription", "turn_detection"), _ga_format)
    _known(s, {"input_audio_format", "input_audio_transcription", "turn_detection", "input_audio_noise_reduction",
               "modalities"} | _IGNORED, "session")
    return _fields(cfg, s, "session", ("input_audio_format", "input_audio_transcription", "turn_detection"),
                   _beta_format)


def _fields(cfg: SessionConfig, obj: dict[str, Any], where: str, keys: tuple[str, str, str],
            check_format: Callable[[Any], None]) -> SessionConfig:
    """The format, transcription and turn detection of either shape (`keys`: their names there)."""
    fmt, transcription, turn = keys
    if fmt in obj:
        check_format(obj[fmt])
    if transcription in obj:
        cfg = _transcription(obj[transcription], f"{where}.{transcription}", cfg)
    if turn in obj:
        cfg = replace(cfg, vad=_turn_detection(obj[turn], f"{where}.{turn}"))
    return cfg


# ---- server events --------------------------------------------------------------------------------
def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "event_id": new_id("event"), **fields}


def _vad_json(vad: VadConfig | None) -> dict[str, Any] | None:
    if vad is None:
        return None
    return {"type": "server_vad", "threshold": vad.threshold, "prefix_padding_ms": vad.prefix_padding_ms,
            "silence_duration_ms": vad.silence_duration_ms}


def session_json(session_id: str, cfg: SessionConfig, model: str | None, dialect: str) -> dict[str, Any]:
    """The effective session; `model`: the transcriber it uses (the default one when cfg names none)."""
    transcription = {"model": model, "language": cfg.language, "prompt": cfg.prompt or ""}
    if dialect == "beta":
        return {"id": session_id, "object": "realtime.transcription_session", "input_audio_format": "pcm16",
                "input_audio_transcription": transcription, "turn_detection": _vad_json(cfg.vad),
                "input_audio_noise_reduction": None, "include": [], "modalities": ["text"]}
    return {"type": "transcription", "id": session_id, "object": "realtime.transcription_session",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": INPUT_RATE}, "transcription": transcription,
                                "turn_detection": _vad_json(cfg.vad), "noise_reduction": None}},
            "include": []}


def session_event(created: bool, session: dict[str, Any], dialect: str) -> dict[str, Any]:
    prefix = "transcription_session" if dialect == "beta" else "session"
    return _event(f"{prefix}.{'created' if created else 'updated'}", session=session)


def _item(item_id: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "object": "realtime.item", "type": "message", "status": status, "role": "user",
            "content": [{"type": "input_audio", "transcript": None}]}


def server_events(ev: Event, dialect: str) -> list[dict[str, Any]]:
    """The protocol events for one session event (a commit is two or three)."""
    if isinstance(ev, SpeechStarted):
        return [_event("input_audio_buffer.speech_started", audio_start_ms=ev.audio_start_ms, item_id=ev.item_id)]
    if isinstance(ev, SpeechStopped):
        return [_event("input_audio_buffer.speech_stopped", audio_end_ms=ev.audio_end_ms, item_id=ev.item_id)]
    if isinstance(ev, Committed):
        out = [_event("input_audio_buffer.committed", item_id=ev.item_id, previous_item_id=ev.previous_item_id)]
        if dialect == "beta":
            out.append(_event("conversation.item.created", previous_item_id=ev.previous_item_id,
                              item=_item(ev.item_id, "completed")))
        else:
            out += [_event("conversation.item.added", previous_item_id=ev.previous_item_id,
                           item=_item(ev.item_id, "completed")),
                    _event("conversation.item.done", previous_item_id=ev.previous_item_id,
                           item=_item(ev.item_id, "completed"))]
        return out
    if isinstance(ev, Cleared):
        return [_event("input_audio_buffer.cleared")]
    if isinstance(ev, TranscriptDelta):
        return [_event("conversation.item.input_audio_transcription.delta", item_id=ev.item_id, content_index=0,
                       delta=ev.text)]
    if isinstance(ev, TranscriptDone):
        return [_event("conversation.item.input_audio_transcription.completed", item_id=ev.item_id, content_index=0,
                       transcript=ev.transcript, language=ev.language,
                       usage={"type": "duration", "seconds": ev.seconds})]
    assert isinstance(ev, TranscriptFailed)
    return [_event("conversation.item.input_audio_transcription.failed", item_id=ev.item_id, content_index=0,
                   error=_error_body(ev.error, None))]


def _code(exc: BaseException) -> str:
    if isinstance(exc, WireError):
        return exc.code
    if isinstance(exc, BufferEmpty):
        return "input_audio_buffer_commit_empty"
    if isinstance(exc, BufferFull):
        return "input_audio_buffer_full"
    if isinstance(exc, ModelNotFound):
        return "model_not_found"
    return classify(exc)[2].lower()


def _error_body(exc: BaseException, client_event_id: str | None) -> dict[str, Any]:
    message = exc.message if isinstance(exc, InferdError) else "internal server error"
    return {"type": classify(exc)[1], "code": _code(exc), "message": message,
            "param": getattr(exc, "param", None), "event_id": client_event_id}


def error_event(exc: BaseException, client_event_id: str | None) -> dict[str, Any]:
    return _event("error", error=_error_body(exc, client_event_id))
