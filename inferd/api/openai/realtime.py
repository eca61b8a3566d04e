"""OpenAI face, realtime transcription: GET /v1/realtime?intent=transcription (and /realtime),
a WebSocket speaking OpenAI's Realtime protocol for transcription sessions (docs/realtime.md).

The route only moves events: a receive loop turns client events into session commands
(realtime_wire.py parses, service/realtime.py acts) and answers a bad one with an `error`
event, the session going on; a send loop drains the session's outbox onto the socket. When
either ends (the client closed or vanished, the client stopped reading) the session is
closed, which cancels its transcriptions. API key, Host and Origin were checked by the
middleware before the handshake (they cover WebSocket scopes too)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from inferd.api.errors import refuse
from inferd.api.openai import realtime_wire as wire
from inferd.errors import InferdError, InvalidInput, Overloaded
from inferd.models import ModelKind
from inferd.service import InferenceService
from inferd.service.realtime import RealtimeSession

log = logging.getLogger("inferd.realtime")
router = APIRouter()

SUBPROTOCOL = "realtime"   # what OpenAI's browser clients offer beside their key; a browser needs one echoed


@router.websocket("/v1/realtime")
@router.websocket("/realtime")
async def realtime(ws: WebSocket) -> None:
    svc: InferenceService = ws.app.state.service
    intent = ws.query_params.get("intent")
    try:
        if intent not in (None, "", "transcription"):
            raise InvalidInput(f"only transcription sessions are served here (intent=transcription), "
                               f"not intent={intent[:50]!r}", "intent")
        if svc.observer.drain.draining:
            raise Overloaded("server is draining (shutting down); retry later or on another instance",
                             svc.observer.drain.retry_after_s() * 1000)
        session = svc.realtime.open(_url_config(svc, ws.query_params.get("model")))
    except InferdError as e:
        return await refuse(e, ws.scope, ws.receive, ws.send)
    dialect = "beta" if "realtime=v1" in ws.headers.get("openai-beta", "") else "ga"
    offered = [p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",")]
    log.info("realtime session %s opened (%s dialect)", session.id, dialect)
    try:
        await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        await _send(ws, wire.session_event(True, _session_json(svc, session, dialect), dialect))
        await _run(ws, svc, session, dialect)
    finally:
        await session.close()   # RequestContext logs HTTP only: the session's line is here
        log.info("realtime session %s closed%s", session.id, " (the client stopped reading)" if session.overflowed else "")
        if ws.client_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await ws.close(1000 if not session.overflowed else 1008)


def _url_config(svc: InferenceService, model: str | None) -> wire.SessionConfig | None:
    """?model= names the session's transcriber when it is one (OpenAI's clients always send a
    model; a conversation model's name there says nothing about transcription)."""
    if not model:
        return None
    spec = svc.lookup(model)
    return wire.SessionConfig(model=spec.name) if spec is not None and spec.kind == ModelKind.TRANSCRIBER else None


def _session_json(svc: InferenceService, session: RealtimeSession, dialect: str) -> dict:
    model = session.config.model
    if model is None:
        found = svc.models(ModelKind.TRANSCRIBER)
        model = found[0].name if len(found) == 1 else None
    return wire.session_json(session.id, session.config, model, dialect)


async def _send(ws: WebSocket, event: dict) -> None:
    await ws.send_text(json.dumps(event, ensure_ascii=False))


async def _run(ws: WebSocket, svc: InferenceService, session: RealtimeSession, dialect: str) -> None:
    sender = asyncio.create_task(_drain(ws, session, dialect))
    receiver = asyncio.create_task(_receive(ws, svc, session, dialect))
    try:
        await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (sender, receiver):
            t.cancel()
        for t in (sender, receiver):
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError, OSError):
                await t


async def _drain(ws: WebSocket, session: RealtimeSession, dialect: str) -> None:
    while not session.overflowed:
        ev = await session.outbox.get()
        for out in [ev] if isinstance(ev, dict) else wire.server_events(ev, dialect):
            await _send(ws, out)


async def _receive(ws: WebSocket, svc: InferenceService, session: RealtimeSession, dialect: str) -> None:
    while not session.overflowed:
        msg = await ws.receive()
        if msg["type"] == "websocket.disconnect":
            return
        event = None
        try:
            event = wire.parse_event(msg.get("text") if msg.get("text") is not None else msg.get("bytes"))
            await _apply(event, svc, session, dialect)
        except InferdError as e:
            session.post(wire.error_event(e, wire.client_event_id(event)))


async def _apply(event: dict, svc: InferenceService, session: RealtimeSession, dialect: str) -> None:
    kind = wire.kind_of(event)
    if kind == "input_audio_buffer.append":
        session.append(wire.audio_of(event))   # resampling and VAD: well under 1 ms per second of audio
    elif kind == "input_audio_buffer.commit":
        session.commit()
    elif kind == "input_audio_buffer.clear":
        session.clear()
    else:  # session.update / transcription_session.update
        session.configure(wire.session_config(event.get("session"), session.config))
        session.post(wire.session_event(False, _session_json(svc, session, dialect), dialect))
