"""The pure parts of realtime transcription, without a model: the streaming resampler, the
energy VAD's turns and the Realtime wire converters (both session shapes, every refusal)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferd.api.openai import realtime_wire as wire
from inferd.errors import InvalidInput, ModelNotFound
from inferd.runtimes.speech.audio import decode
from inferd.media.pcm import StreamResampler, pcm16_samples
from inferd.media.vad import EnergyVad, TurnEnded, TurnStarted, VadConfig
from inferd.service.realtime import BufferEmpty, Committed, SessionConfig, SpeechStarted, TranscriptDone
from tests.conftest import FIXTURES

CLIP = decode((FIXTURES / "speech" / "clips" / "fox.wav").read_bytes(), 16000)
RATE = 16000


def test_streamed_resampling_equals_one_shot_and_the_file_decoder():
    x24 = decode((FIXTURES / "speech" / "clips" / "fox.wav").read_bytes(), 24000)
    pcm = (np.clip(x24, -1, 1) * 32767).astype("<i2")
    r = StreamResampler(24000, 16000)
    pieces = np.concatenate([r.feed(pcm[i:i + 480]) for i in range(0, pcm.size, 480)])  # 20 ms chunks
    whole = StreamResampler(24000, 16000).feed(pcm)
    assert pieces.size == whole.size and np.array_equal(pieces, whole)   # no seams at chunk edges
    n = min(whole.size, CLIP.size)
    assert CLIP.size - whole.size < 64   # the filter's tail: a few ms still inside the resampler
    assert np.corrcoef(whole[:n], CLIP[:n])[0, 1] > 0.999


def test_pcm16_needs_whole_samples():
    assert pcm16_samples(b"\x01\x00\xff\xff").tolist() == [1, -1]
    with pytest.raises(InvalidInput, match="2 bytes per sample"):
        pcm16_samples(b"\x01\x02\x03")


def _turns(audio: np.ndarray, cfg: VadConfig, chunk: int = 1600, max_turn: int = 60 * RATE):
    vad = EnergyVad(cfg, RATE, max_turn)
    return [e for i in range(0, audio.size, chunk) for e in vad.feed(audio[i:i + chunk])]


def _speech_bounds(x: np.ndarray) -> tuple[int, int]:
    loud = np.flatnonzero(np.abs(x) > 0.01)
    return int(loud[0]), int(loud[-1])


def test_vad_turns_follow_the_speech_with_padding_and_silence():
    gap = np.zeros(RATE, np.float32)
    audio = np.concatenate([gap, CLIP, gap, CLIP, gap])
    evs = _turns(audio, VadConfig(prefix_padding_ms=300, silence_duration_ms=500))
    assert [type(e) for e in evs] == [TurnStarted, TurnEnded, TurnStarted, TurnEnded]
    a, b = _speech_bounds(CLIP)
    s1, e1 = evs[0].start, evs[1].end
    assert RATE + a - 300 * 16 - 960 <= s1 <= RATE + a - 300 * 16 + 960   # padding before the first loud frame
    assert RATE + b + 500 * 16 - 640 <= e1 <= RATE + b + 500 * 16 + 640   # the silence timeout belongs to the turn
    assert evs[2].start - (2 * RATE + CLIP.size + a) == pytest.approx(s1 - (RATE + a), abs=640)
    # chunking does not change the decisions
    assert _turns(audio, VadConfig(prefix_padding_ms=300, silence_duration_ms=500), chunk=333) == evs


def test_vad_threshold_silence_duration_and_max_turn():
    gap = np.zeros(RATE, np.float32)
    audio = np.concatenate([gap, CLIP, gap])
    assert _turns(audio, VadConfig(threshold=1.0)) == []                  # -10 dBFS frames only: none here
    assert _turns(audio * 0.003, VadConfig(threshold=0.5)) == []          # 50 dB quieter: below -40 dBFS
    assert len(_turns(audio * 0.003, VadConfig(threshold=0.0))) == 2      # heard above -70 dBFS
    # a silence timeout longer than the trailing gap: the turn stays open
    assert [type(e) for e in _turns(audio, VadConfig(silence_duration_ms=2000))] == [TurnStarted]
    # a turn longer than max_turn is cut there
    evs = _turns(audio, VadConfig(), max_turn=RATE)
    assert isinstance(evs[1], TurnEnded) and evs[1].end - evs[0].start == RATE
    # a click is not a turn (less than MIN_SPEECH_MS loud)
    click = gap.copy()
    click[8000:8320] = 0.5
    assert _turns(click, VadConfig()) == []


# ---- wire -----------------------------------------------------------------------------------------
def test_both_session_shapes_give_the_same_config():
    ga = {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 24000}, "noise_reduction": None,
        "transcription": {"model": "m", "language": "EN", "prompt": "names: Ada"},
        "turn_detection": {"type": "server_vad", "threshold": 0.7, "prefix_padding_ms": 100,
                           "silence_duration_ms": 800}}}}
    beta = {"input_audio_format": "pcm16", "input_audio_transcription": {"model": "m", "language": "en",
                                                                         "prompt": "names: Ada"},
            "turn_detection": {"type": "server_vad", "threshold": 0.7, "prefix_padding_ms": 100,
                               "silence_duration_ms": 800}}
    want = SessionConfig("m", "en", "names: Ada", VadConfig(0.7, 100, 800))
    assert wire.session_config(ga, SessionConfig()) == wire.session_config(beta, SessionConfig()) == want
    # absent fields stay; null turn detection is commits only
    assert wire.session_config({"turn_detection": None}, want) == SessionConfig("m", "en", "names: Ada", None)
    assert wire.session_config({"type": "transcription"}, want) == want
    out = wire.session_json("sess_1", want, "m", "ga")
    assert out["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 800
    assert wire.session_json("sess_1", want, "m", "beta")["input_audio_transcription"]["language"] == "en"


@pytest.mark.parametrize("session, param", [
    ({"input_audio_format": "g711_ulaw"}, "session.input_audio_format"),
    ({"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}, "session.audio.input.format"),
    ({"type": "realtime"}, "session.type"),
    ({"turn_detection": {"type": "semantic_vad"}}, "session.turn_detection.type"),
    ({"turn_detection": {"type": "server_vad", "threshold": 2}}, "session.turn_detection.threshold"),
    ({"turn_detection": {"type": "server_vad", "silence_duration_ms": "long"}},
     "session.turn_detection.silence_duration_ms"),
    ({"input_audio_transcription": {"language": "english"}}, "session.input_audio_transcription.language"),
    ({"input_audio_transcription": {"temperature": 0}}, "session.input_audio_transcription.temperature"),
    ({"voice": "alloy"}, "session.voice"),
])
def test_bad_session_fields_name_their_parameter(session, param):
    with pytest.raises(wire.WireError) as e:
        wire.session_config(session, SessionConfig())
    assert e.value.param == param


def test_events_and_errors_on_the_wire():
    with pytest.raises(wire.WireError) as e:
        wire.parse_event("{oops")
    assert e.value.code == "invalid_json"
    with pytest.raises(wire.WireError) as e:
        wire.parse_event(b"\x00binary")
    assert e.value.code == "invalid_json"
    ev = wire.parse_event(json.dumps({"type": "conversation.item.create", "event_id": "e1"}))
    with pytest.raises(wire.WireError) as e:
        wire.kind_of(ev)
    err = wire.error_event(e.value, wire.client_event_id(ev))
    assert err["type"] == "error" and err["error"]["event_id"] == "e1" and err["error"]["param"] == "type"
    assert wire.error_event(ModelNotFound("x"), None)["error"]["code"] == "model_not_found"
    assert wire.error_event(BufferEmpty("empty"), "e2")["error"]["code"] == "input_audio_buffer_commit_empty"
    with pytest.raises(wire.WireError) as e:
        wire.audio_of({"audio": "!!"})
    assert e.value.code == "invalid_base64"
    # a commit is committed + item events, per dialect
    assert [x["type"] for x in wire.server_events(Committed("item_2", "item_1"), "beta")] == [
        "input_audio_buffer.committed", "conversation.item.created"]
    ga = wire.server_events(Committed("item_2", "item_1"), "ga")
    assert [x["type"] for x in ga] == ["input_audio_buffer.committed", "conversation.item.added",
                                       "conversation.item.done"]
    assert all(x["previous_item_id"] == "item_1" and x["event_id"].startswith("event_") for x in ga)
    (started,) = wire.server_events(SpeechStarted("item_3", 1250), "ga")
    assert started["audio_start_ms"] == 1250 and started["item_id"] == "item_3"
    (done,) = wire.server_events(TranscriptDone("item_3", "hello", 1.5, "en"), "ga")
    assert done["transcript"] == "hello" and done["usage"] == {"type": "duration", "seconds": 1.5}
