"""Realtime transcription over a real WebSocket (/v1/realtime?intent=transcription) with the
official openai client's realtime connections, unmodified (GA `client.realtime` and beta
`client.beta.realtime`), on the built-in whisper-tiny.en fed from the committed espeak-ng
clips: committed buffers, server VAD turns, error events, sessions side by side sharing the
model's batches, the API key, Host/Origin checks, and a client that vanishes mid-turn."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time

import httpx
import numpy as np
import openai
import pytest
import websockets

from inferd.runtimes.speech.audio import decode
from tests.conftest import FIXTURES
from tests.server import serve
from tests import test_speech_builtin as builtin

pytestmark = pytest.mark.slow

MODEL = builtin.MODEL
srv = builtin.srv   # the built-in transcriber's server (one for this module)

CLIPS = FIXTURES / "speech" / "clips"
SENTENCES = json.loads((CLIPS / "clips.json").read_text())
CHUNK = 4800   # bytes: 100 ms of PCM16 at 24 kHz


def pcm24(name: str) -> bytes:
    x = decode((CLIPS / name).read_bytes(), 24000)
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


def silence(seconds: float) -> bytes:
    return bytes(int(seconds * 24000) * 2)


def words(text: str) -> set[str]:
    return set(re.sub(r"[^a-z' ]", " ", text.lower()).split())


def covers(transcript: str, clip: str, missing: int = 1) -> bool:
    """The transcript has the clip's words, but for `missing` (tiny.en hears "jumped" for "jumps")."""
    return len(words(SENTENCES[clip]) - words(transcript)) <= missing


@pytest.fixture(scope="module")
def locked():
    """A server with an API key and a 2 s buffer (its tests transcribe nothing)."""
    with serve(builtins=True, api_key="sesame", realtime_max_buffer_seconds=2) as s:
        yield s


def ga(url: str, key: str = "unused") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def beta(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", websocket_base_url=url.replace("http", "ws") + "/v1",
                              api_key="unused", max_retries=0)


async def feed(conn, pcm: bytes) -> None:
    for i in range(0, len(pcm), CHUNK):
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + CHUNK]).decode())


async def until(conn, kind: str, n: int = 1, timeout: float = 120) -> list:
    """Every event received up to and including the n-th of type `kind`."""
    got: list = []
    async with asyncio.timeout(timeout):
        while sum(e.type == kind for e in got) < n:
            got.append(await conn.recv())
    return got


def of(events: list, kind: str) -> list:
    return [e for e in events if e.type == kind]


NO_VAD = {"type": "transcription", "audio": {"input": {
    "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None,
    "transcription": {"model": MODEL, "language": "en"}}}}


async def test_ga_client_transcribes_a_committed_buffer(srv):
    async with ga(srv.url).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        created = await conn.recv()
        assert created.type == "session.created" and created.session.type == "transcription"
        assert created.session.audio.input.transcription.model == MODEL  # the only transcriber served
        assert created.session.audio.input.turn_detection.type == "server_vad"  # OpenAI's default
        await conn.session.update(session=NO_VAD)
        updated = await conn.recv()
        assert updated.type == "session.updated" and updated.session.audio.input.turn_detection is None
        assert updated.session.audio.input.transcription.language == "en"
        await feed(conn, pcm24("fox.wav"))
        await conn.input_audio_buffer.commit()
        events = await until(conn, "conversation.item.input_audio_transcription.completed")
    committed = of(events, "input_audio_buffer.committed")[0]
    assert committed.previous_item_id is None and committed.item_id.startswith("item_")
    assert [e.type for e in events[:3]] == ["input_audio_buffer.committed", "conversation.item.added",
                                            "conversation.item.done"]
    assert events[1].item.id == committed.item_id and events[1].item.role == "user"
    assert not of(events, "input_audio_buffer.speech_started")  # turn detection is off
    done = events[-1]
    assert done.item_id == committed.item_id and covers(done.transcript, "fox.wav"), done.transcript
    deltas = of(events, "conversation.item.input_audio_transcription.delta")
    assert deltas and "".join(d.delta for d in deltas) == done.transcript
    assert done.usage.type == "duration" and done.usage.seconds == pytest.approx(3.4, abs=0.3)
    assert len({e.event_id for e in events}) == len(events)


async def test_server_vad_splits_two_utterances_into_two_items(srv):
    """The beta client (transcription_session.update, conversation.item.created): two clips with
    1.5 s of silence between them, never committed by the client, become two turns."""
    async with beta(srv.url).beta.realtime.connect(model=MODEL, extra_query={"intent": "transcription"}) as conn:
        assert (await conn.recv()).type == "transcription_session.created"
        await conn.transcription_session.update(session={
            "input_audio_format": "pcm16", "input_audio_transcription": {"model": MODEL},
            "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                               "silence_duration_ms": 600}})
        updated = await conn.recv()
        assert updated.type == "transcription_session.updated"
        assert updated.session.turn_detection.silence_duration_ms == 600
        audio = silence(1.0) + pcm24("fox.wav") + silence(1.5) + pcm24("call.wav") + silence(1.5)
        await feed(conn, audio)
        events = await until(conn, "conversation.item.input_audio_transcription.completed", 2)
    started, stopped = of(events, "input_audio_buffer.speech_started"), of(events, "input_audio_buffer.speech_stopped")
    committed, created = of(events, "input_audio_buffer.committed"), of(events, "conversation.item.created")
    assert len(started) == len(stopped) == len(committed) == len(created) == 2
    first, second = (c.item_id for c in committed)
    assert [s.item_id for s in started] == [s.item_id for s in stopped] == [first, second]
    assert committed[0].previous_item_id is None and committed[1].previous_item_id == first
    assert created[1].previous_item_id == first and created[1].item.id == second
    fox_ms = len(pcm24("fox.wav")) // 48
    assert 0 < started[0].audio_start_ms < 1000 + 400          # the speech, less the prefix padding
    assert stopped[0].audio_end_ms - started[0].audio_start_ms < fox_ms + 600 + 300
    assert 1000 + fox_ms < started[1].audio_start_ms < 1000 + fox_ms + 1500
    done = {e.item_id: e.transcript for e in of(events, "conversation.item.input_audio_transcription.completed")}
    assert covers(done[first], "fox.wav") and covers(done[second], "call.wav"), done
    assert not words(done[first]) & {"please", "call", "home", "tonight"}   # each turn holds only its clip


async def _errors_of(conn) -> list:
    """Bad events on one session: each answered by an error naming the offending event."""
    await conn.send_raw("{not json")
    await conn.send_raw(json.dumps({"type": "response.create", "event_id": "ev_unknown"}))
    await conn.send_raw(json.dumps({"type": "input_audio_buffer.append", "event_id": "ev_b64", "audio": "@@not base64"}))
    wav = (CLIPS / "fox.wav").read_bytes()
    await conn.input_audio_buffer.append(audio=base64.b64encode(wav[:9600]).decode(), event_id="ev_wav")
    await conn.input_audio_buffer.append(audio=base64.b64encode(b"\x01\x02\x03").decode(), event_id="ev_odd")
    await conn.session.update(session={"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 16000}}}}, event_id="ev_rate")
    await conn.send_raw(json.dumps({"type": "transcription_session.update", "event_id": "ev_ulaw",
                                    "session": {"input_audio_format": "g711_ulaw"}}))
    await conn.session.update(session={"type": "transcription", "audio": {"input": {
        "transcription": {"model": "whisper-1"}}}}, event_id="ev_model")
    await conn.input_audio_buffer.commit(event_id="ev_empty")
    got = []
    async with asyncio.timeout(30):
        while len(got) < 9:
            e = await conn.recv()
            assert e.type == "error", e   # nothing else: no bad event changed the session
            got.append(e.error)
    return got


async def test_bad_inputs_get_error_events_and_another_session_carries_on(srv):
    client = ga(srv.url)
    async with (client.realtime.connect(extra_query={"intent": "transcription"}) as bad,
                client.realtime.connect(extra_query={"intent": "transcription"}) as good):
        assert (await bad.recv()).type == (await good.recv()).type == "session.created"
        await good.session.update(session=NO_VAD)
        assert (await good.recv()).type == "session.updated"
        await feed(good, pcm24("walk.wav"))
        await good.input_audio_buffer.commit()
        errors, good_events = await asyncio.gather(
            _errors_of(bad), until(good, "conversation.item.input_audio_transcription.completed"))
        # the bad session still works: a proper turn after all that is transcribed
        await bad.session.update(session=NO_VAD)
        assert (await bad.recv()).type == "session.updated"
        await feed(bad, pcm24("call.wav"))
        await bad.input_audio_buffer.commit()
        after = await until(bad, "conversation.item.input_audio_transcription.completed")
    by_event = {e.event_id: e for e in errors}
    assert [e.code for e in errors if e.event_id is None] == ["invalid_json"]
    assert by_event["ev_unknown"].code == "invalid_value" and by_event["ev_unknown"].param == "type"
    assert "response.create" in by_event["ev_unknown"].message
    assert by_event["ev_b64"].code == "invalid_base64"
    assert by_event["ev_wav"].code == "invalid_audio_format" and "WAV" in by_event["ev_wav"].message
    assert by_event["ev_odd"].param == "audio" and "2 bytes per sample" in by_event["ev_odd"].message
    assert by_event["ev_rate"].param == "session.audio.input.format"
    assert by_event["ev_ulaw"].param == "session.input_audio_format"
    assert by_event["ev_model"].code == "model_not_found" and "whisper-1" in by_event["ev_model"].message
    assert by_event["ev_empty"].code == "input_audio_buffer_commit_empty"
    assert all(e.type == "invalid_request_error" for e in errors if e.code != "model_not_found")
    assert covers(good_events[-1].transcript, "walk.wav") and covers(after[-1].transcript, "call.wav")


async def test_clear_empties_the_buffer(srv):
    async with ga(srv.url).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.recv()
        await conn.session.update(session=NO_VAD)
        await conn.recv()
        await feed(conn, pcm24("fox.wav"))
        await conn.input_audio_buffer.clear()
        assert (await conn.recv()).type == "input_audio_buffer.cleared"
        await conn.input_audio_buffer.commit(event_id="ev_after_clear")
        e = await conn.recv()
        assert e.type == "error" and e.error.code == "input_audio_buffer_commit_empty"
        assert e.error.event_id == "ev_after_clear"


async def test_sessions_share_the_models_batches(srv):
    """Three sessions commit while the model decodes a long turn of a fourth: their three turns
    wait in the model's queue together and go through it as one batch."""
    srv.call(srv.service.load_model(MODEL), timeout=120)
    handle = srv.service.registry.loaded[MODEL].model
    before = handle.scheduler.stats.largest_batch
    client = ga(srv.url)
    long = pcm24("fox.wav") + pcm24("call.wav")
    conns = [await client.realtime.connect(extra_query={"intent": "transcription"}).enter() for _ in range(4)]
    try:
        for c in conns:
            await c.recv()
            await c.session.update(session=NO_VAD)
            await c.recv()
        await feed(conns[0], long)
        for c in conns[1:]:
            await feed(c, pcm24("walk.wav"))
        await conns[0].input_audio_buffer.commit()
        await until(conns[0], "input_audio_buffer.committed")
        await asyncio.sleep(0.3)   # its batch is running now
        for c in conns[1:]:
            await c.input_audio_buffer.commit()
        results = await asyncio.gather(*(until(c, "conversation.item.input_audio_transcription.completed")
                                         for c in conns))
    finally:
        for c in conns:
            await c.close()
    assert covers(results[0][-1].transcript, "call.wav")
    assert all(covers(r[-1].transcript, "walk.wav") for r in results[1:])
    assert before < 3 <= handle.scheduler.stats.largest_batch


def _gauge(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics").text
    m = re.search(rf"^inferd_{name} (\S+)$", text, re.M)
    assert m, f"no {name} in /metrics"
    return float(m.group(1))


async def _vanish_after(url: str, events: list[dict], wait_for: str) -> None:
    """A raw client that sends `events`, reads up to a `wait_for` event, then drops its TCP
    connection without a close handshake (a crashed client, a lost network)."""
    async with websockets.connect(url.replace("http", "ws") + "/v1/realtime?intent=transcription") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        for e in events:
            await ws.send(json.dumps(e))
        async with asyncio.timeout(60):
            while json.loads(await ws.recv())["type"] != wait_for:
                pass
        ws.transport.abort()


def _appends(pcm: bytes) -> list[dict]:
    return [{"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[i:i + CHUNK]).decode()}
            for i in range(0, len(pcm), CHUNK)]


async def _until_closed(rt, cancelled: int | None = None) -> None:
    deadline = time.time() + 30
    while rt.stats.sessions_open or (cancelled is not None and rt.stats.turns_cancelled == cancelled):
        assert time.time() < deadline, rt.stats
        await asyncio.sleep(0.05)


async def test_a_client_that_vanishes_mid_turn_frees_its_session(srv):
    rt = srv.service.realtime
    cancelled, total = rt.stats.turns_cancelled, _gauge(srv.url, "realtime_sessions_total")
    await _until_closed(rt)
    # a long turn, committed, then the client is gone while it is being transcribed
    turn = pcm24("fox.wav") + pcm24("call.wav")
    update = {"type": "session.update", "session": NO_VAD}
    await _vanish_after(srv.url, [update, *_appends(turn), {"type": "input_audio_buffer.commit"}],
                        "input_audio_buffer.committed")
    await _until_closed(rt, cancelled)
    assert rt.stats.turns_cancelled == cancelled + 1 and not rt.sessions
    assert _gauge(srv.url, "realtime_sessions_open") == 0 and _gauge(srv.url, "realtime_turns_pending") == 0
    # and one gone in the middle of speaking (server VAD: a turn started, never ended)
    await _vanish_after(srv.url, _appends(silence(0.5) + pcm24("fox.wav")[:48000]), "input_audio_buffer.speech_started")
    await _until_closed(rt)
    assert _gauge(srv.url, "realtime_sessions_total") == total + 2
    # the cancelled turn's batch may still be decoding (a running batch is not interrupted): a
    # request queued behind it returns once the model is idle, so the server stops promptly
    r = await ga(srv.url).audio.transcriptions.create(model=MODEL, file=open(CLIPS / "walk.wav", "rb"))
    assert covers(r.text, "walk.wav")


# ---- the locked server: API key, Host/Origin, buffer limit ------------------------------------------
def _ws(srv) -> str:
    return srv.url.replace("http", "ws") + "/v1/realtime?intent=transcription"


async def test_api_key_is_required_on_the_websocket(locked):
    with pytest.raises(websockets.InvalidStatus) as e:
        async with ga(locked.url, key="wrong").realtime.connect(extra_query={"intent": "transcription"}):
            pass
    assert e.value.response.status_code == 401
    assert json.loads(e.value.response.body)["error"]["type"] == "authentication_error"
    with pytest.raises(websockets.InvalidStatus) as e:
        async with websockets.connect(_ws(locked)):
            pass
    assert e.value.response.status_code == 401
    async with ga(locked.url, key="sesame").realtime.connect(extra_query={"intent": "transcription"}) as conn:
        assert (await conn.recv()).type == "session.created"
    # a browser's way: the key as a subprotocol beside "realtime", which the server picks
    async with websockets.connect(_ws(locked), subprotocols=["realtime", "openai-insecure-api-key.sesame"]) as ws:
        assert ws.subprotocol == "realtime"
        assert json.loads(await ws.recv())["type"] == "session.created"
    with pytest.raises(websockets.InvalidStatus) as e:
        async with websockets.connect(_ws(locked), subprotocols=["realtime", "openai-insecure-api-key.nope"]):
            pass
    assert e.value.response.status_code == 401


async def test_host_and_origin_are_checked_on_the_websocket(locked):
    auth = {"Authorization": "Bearer sesame"}
    with pytest.raises(websockets.InvalidStatus) as e:
        async with websockets.connect(_ws(locked), additional_headers=auth, origin="https://evil.example"):
            pass
    assert e.value.response.status_code == 403 and b"Origin" in e.value.response.body
    with pytest.raises(websockets.InvalidStatus) as e:
        async with websockets.connect(_ws(locked), additional_headers={**auth, "Host": "rebound.example"}):
            pass
    assert e.value.response.status_code == 403 and b"Host" in e.value.response.body
    async with websockets.connect(_ws(locked), additional_headers=auth, origin="http://localhost:3000") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"


async def test_a_full_buffer_is_an_error_not_more_memory(locked):
    async with ga(locked.url, key="sesame").realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.recv()
        await conn.session.update(session={"type": "transcription", "audio": {"input": {"turn_detection": None}}})
        await conn.recv()
        await feed(conn, silence(1.9))
        await conn.input_audio_buffer.append(audio=base64.b64encode(silence(0.5)).decode(), event_id="ev_full")
        e = await conn.recv()
        assert e.type == "error" and e.error.code == "input_audio_buffer_full" and e.error.event_id == "ev_full"
        session = next(iter(locked.service.realtime.sessions.values()))
        assert session.buffered_ms <= 2000
        await conn.input_audio_buffer.clear()
        assert (await conn.recv()).type == "input_audio_buffer.cleared"


async def test_other_intents_and_the_session_limit(locked):
    auth = {"Authorization": "Bearer sesame"}
    with pytest.raises(websockets.InvalidStatus) as e:
        async with websockets.connect(_ws(locked).replace("transcription", "conversation"), additional_headers=auth):
            pass
    assert e.value.response.status_code == 400 and b"intent=transcription" in e.value.response.body
    rt = locked.service.realtime
    await _until_closed(rt)
    limit, rt.limits.max_sessions = rt.limits.max_sessions, 2
    try:
        async with (websockets.connect(_ws(locked), additional_headers=auth),
                    websockets.connect(_ws(locked), additional_headers=auth)):
            with pytest.raises(websockets.InvalidStatus) as e:
                async with websockets.connect(_ws(locked), additional_headers=auth):
                    pass
            assert e.value.response.status_code == 503 and b"realtime sessions" in e.value.response.body
            assert e.value.response.headers["retry-after"] == "1"
    finally:
        rt.limits.max_sessions = limit
