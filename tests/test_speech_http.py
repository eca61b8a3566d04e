"""Speech over real HTTP on the fixture models (transcribers/ in a models_dir): the official
openai client on /v1/audio/transcriptions and /v1/audio/translations, httpx on
/ai/v1/transcribe, streaming, catalogs, budgets and every error in its family's envelope."""

from __future__ import annotations

import base64
import json
import shutil

import httpx
import openai
import pytest

from tests.conftest import FIXTURES
from tests.server import serve

SPEECH = FIXTURES / "speech"
CLIPS = SPEECH / "clips"
WREF = json.loads((SPEECH / "whisper-tiny-random" / "reference.json").read_text())["clips"]
CREF = json.loads((SPEECH / "wav2vec2-tiny-random" / "reference.json").read_text())["clips"]
GREEDY = {"beam_size": 1, "temperature_fallback": False}  # the reference is transformers' greedy decoding


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    shutil.copytree(SPEECH / "whisper-tiny-random", d / "transcribers" / "tiny-random")
    shutil.copytree(SPEECH / "wav2vec2-tiny-random", d / "transcribers" / "facebook" / "w2v-tiny")
    with serve(models_dir=str(d), threads=1, max_audio_bytes=200_000, max_audio_seconds=20) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def post(srv, path, **kw):
    return httpx.post(srv.url + path, timeout=60, **kw)


def test_transcribers_are_listed_in_both_catalogs(srv, client):
    ids = {m.id for m in client.models.list().data}
    assert {"tiny-random", "facebook/w2v-tiny"} <= ids
    cat = httpx.get(srv.url + "/ai/v1/models").json()["transcribers"]
    assert set(cat) == {"tiny-random", "facebook/w2v-tiny"}
    assert {"translate", "language_detection"} <= set(cat["tiny-random"]["capabilities"])
    assert "translate" not in cat["facebook/w2v-tiny"]["capabilities"]
    assert cat["tiny-random"]["inputs"] == ["audio"]


@pytest.mark.parametrize("name", list(WREF))
def test_openai_client_transcription_equals_the_reference(client, name):
    r = client.audio.transcriptions.create(model="tiny-random", file=open(CLIPS / name, "rb"), extra_body=GREEDY)
    assert r.text == WREF[name]["transcribe"]["text"].strip()
    assert r.language == WREF[name]["language"]  # detected (language defaults to auto)
    assert 0 < r.language_probability <= 1
    assert r.duration == pytest.approx(3.0, abs=0.6)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the client marks translations deprecated
def test_openai_client_translation_equals_the_reference(client):
    name = "walk.flac"  # a clip whose reference translation differs from its transcription
    r = client.audio.translations.create(model="tiny-random", file=open(CLIPS / name, "rb"), extra_body=GREEDY)
    assert r.text == WREF[name]["translate"]["text"].strip()
    assert r.text != WREF[name]["transcribe"]["text"].strip()


def test_text_srt_vtt_and_verbose_json(client):
    f = CLIPS / "fox.flac"
    text = client.audio.transcriptions.create(model="tiny-random", file=open(f, "rb"), response_format="text",
                                              extra_body=GREEDY)
    assert isinstance(text, str) and text.strip() == WREF["fox.wav"]["transcribe"]["text"].strip()  # FLAC is lossless
    srt = client.audio.transcriptions.create(model="facebook/w2v-tiny", file=open(f, "rb"), response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:0") and CREF["fox.wav"]["text"][:20] in srt
    vtt = client.audio.transcriptions.create(model="facebook/w2v-tiny", file=open(f, "rb"), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")
    v = client.audio.transcriptions.create(model="facebook/w2v-tiny", file=open(CLIPS / "call.wav", "rb"),
                                           response_format="verbose_json", timestamp_granularities=["word", "segment"])
    assert v.text == CREF["call.wav"]["text"] and v.language == "en" and v.duration == pytest.approx(3.07, abs=0.1)
    seg = v.segments[0]
    assert seg.tokens == CREF["call.wav"]["tokens"] and seg.start == 0.0
    assert [w.word for w in v.words] == CREF["call.wav"]["text"].split()
    assert all(w.start < w.end for w in v.words)


def test_verbose_json_carries_whisper_confidence_probes(client):
    v = client.audio.transcriptions.create(model="tiny-random", file=open(CLIPS / "walk.flac", "rb"),
                                           response_format="verbose_json", timestamp_granularities=["word"],
                                           extra_body=GREEDY)
    assert v.language == WREF["walk.flac"]["language"] and v.segments
    for s in v.segments:
        assert s.avg_logprob < 0 and 0 <= s.no_speech_prob <= 1 and s.compression_ratio > 0 and s.temperature == 0
    assert isinstance(v.words, list)


def test_stream_sends_deltas_then_done_then_DONE(srv, client):
    with open(CLIPS / "fox.wav", "rb") as f:
        r = post(srv, "/v1/audio/transcriptions", files={"file": ("fox.wav", f)},
                 data={"model": "tiny-random", "stream": "true", "beam_size": "1", "temperature_fallback": "false"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    lines = [ln[6:] for ln in r.text.split("\n") if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    events = [json.loads(x) for x in lines[:-1]]
    assert events[-1]["type"] == "transcript.text.done"
    deltas = [e["delta"] for e in events if e["type"] == "transcript.text.delta"]
    assert "".join(deltas) == events[-1]["text"] == WREF["fox.wav"]["transcribe"]["text"].strip()
    # and the official client reads the same stream
    got = list(client.audio.transcriptions.create(model="facebook/w2v-tiny", file=open(CLIPS / "fox.wav", "rb"),
                                                  stream=True))
    assert got[-1].type == "transcript.text.done" and got[-1].text == CREF["fox.wav"]["text"]


def test_alias_routes(srv):
    with open(CLIPS / "call.mp3", "rb") as f:
        r = post(srv, "/audio/transcriptions", files={"file": ("a.mp3", f)}, data={"model": "facebook/w2v-tiny"})
    assert r.status_code == 200 and r.json()["text"]
    with open(CLIPS / "call.mp3", "rb") as f:
        r = post(srv, "/audio/translations", files={"file": ("a.mp3", f)}, data={"model": "facebook/w2v-tiny"})
    assert r.status_code == 400 and "translate" in r.json()["error"]["message"]


def test_antfly_transcribe(srv):
    for model, want in (("facebook/w2v-tiny", CREF["walk.flac"]["text"]), ("tiny-random", None)):
        audio = base64.b64encode((CLIPS / "walk.flac").read_bytes()).decode()
        r = post(srv, "/ai/v1/transcribe", json={"model": model, "audio": audio, "language": "en"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == model and body["object"] == "list"
        item = body["data"][0]
        assert item["object"] == "transcription" and item["index"] == 0 and item["language"] == "en"
        if want is not None:
            assert item["text"] == want
        assert body["usage"]["completion_tokens"] > 0
    data_uri = "data:audio/flac;base64," + base64.b64encode((CLIPS / "walk.flac").read_bytes()).decode()
    assert post(srv, "/ai/v1/transcribe", json={"model": "facebook/w2v-tiny", "audio": data_uri}).status_code == 200


@pytest.mark.parametrize("body, status, code", [
    ({"model": "facebook/w2v-tiny", "audio": "not base64 !!"}, 400, "INVALID_REQUEST"),
    ({"model": "facebook/w2v-tiny", "audio": base64.b64encode(b"garbage bytes").decode()}, 400, "INVALID_REQUEST"),
    ({"model": "nope", "audio": "AAAA"}, 404, "MODEL_NOT_FOUND"),
    ({"model": "facebook/w2v-tiny", "audio": "A" * 400_000}, 413, "PAYLOAD_TOO_LARGE"),
    ({"model": "tiny-random"}, 400, "INVALID_REQUEST"),
])
def test_antfly_errors(srv, body, status, code):
    r = post(srv, "/ai/v1/transcribe", json=body)
    assert r.status_code == status and r.json()["error"] == code, r.text


def test_openai_errors(srv, client):
    wav = (CLIPS / "fox.wav").read_bytes()
    r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "file"  # a missing multipart audio file
    r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random"}, files={"file": ("x.wav", b"not audio")})
    assert r.status_code == 400 and "decode" in r.json()["error"]["message"]
    r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random"}, files={"file": ("x.wav", b"")})
    assert r.status_code == 400 and "empty" in r.json()["error"]["message"]
    with pytest.raises(openai.NotFoundError):
        client.audio.transcriptions.create(model="nope", file=("a.wav", wav))
    r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random", "response_format": "xml"},
             files={"file": ("a.wav", wav)})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    for field, value in (("temperature", "hot"), ("temperature", "1.5"), ("language", "english!"), ("stream", "maybe"),
                         ("timestamp_granularities[]", "sentence"), ("beam_size", "99"), ("temperature_fallback", "x")):
        r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random", field: value},
                 files={"file": ("a.wav", wav)})
        assert r.status_code == 400, (field, r.text)
    r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random", "timestamp_granularities[]": "word"},
             files={"file": ("a.wav", wav)})
    assert r.status_code == 400 and "verbose_json" in r.json()["error"]["message"]
    r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random", "response_format": "srt", "stream": "true"},
             files={"file": ("a.wav", wav)})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random", "language": "xx"},
             files={"file": ("a.wav", wav)})
    assert r.status_code == 400 and "language" in r.json()["error"]["message"]


def test_too_large_and_too_long_are_413(srv, client):
    big = b"\0" * 250_000
    with pytest.raises(openai.APIStatusError) as e:
        client.audio.transcriptions.create(model="tiny-random", file=("big.wav", big))
    assert e.value.status_code == 413
    import numpy as np

    from tests.test_speech_runtime import wav_bytes
    long = wav_bytes(np.zeros(16000 * 25, np.float32), rate=4000)  # 100 s at 4 kHz: 200 kB, over 20 s
    r = post(srv, "/v1/audio/transcriptions", data={"model": "tiny-random"}, files={"file": ("long.wav", long)})
    assert r.status_code == 413 and "s" in r.json()["error"]["message"]


def test_wrong_kind_is_400_in_both_families(tmp_path):
    d = tmp_path / "models"
    shutil.copytree(FIXTURES / "speech" / "wav2vec2-tiny-random", d / "transcribers" / "w2v")
    onnx_embedders = [p for p in (FIXTURES / "onnx").iterdir() if p.is_dir()]
    shutil.copytree(onnx_embedders[0], d / "embedders" / "emb")
    with serve(models_dir=str(d), threads=1) as s:
        wav = (CLIPS / "fox.wav").read_bytes()
        r = httpx.post(s.url + "/v1/audio/transcriptions", data={"model": "emb"}, files={"file": ("a.wav", wav)})
        assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_supported"
        r = httpx.post(s.url + "/ai/v1/transcribe", json={"model": "emb", "audio": base64.b64encode(wav).decode()})
        assert r.status_code == 400 and r.json()["error"] == "MODEL_NOT_SUPPORTED"
        r = httpx.post(s.url + "/ai/v1/transcribe", json={"audio": base64.b64encode(wav).decode()}, timeout=60)
        assert r.status_code == 200 and r.json()["model"] == "w2v"  # the only transcriber


def test_a_client_that_leaves_stops_costing_windows(tmp_path):
    """A long file is many windows; once its client disconnects, the windows not yet decoded
    are dropped (one window per batch here, so the drop is visible in the queue's stats)."""
    import time

    import numpy as np

    from tests.test_speech_runtime import clip, wav_bytes
    d = tmp_path / "models"
    shutil.copytree(SPEECH / "whisper-tiny-random", d / "transcribers" / "tiny-random")
    gap = np.zeros(16000 * 2, np.float32)
    audio = wav_bytes(np.concatenate([clip("fox.wav"), gap, clip("call.wav"), gap, clip("walk.wav"), gap] * 24))
    with serve(models_dir=str(d), threads=1, max_batch_size=1) as s:
        with httpx.stream("POST", s.url + "/v1/audio/transcriptions", files={"file": ("long.wav", audio)},
                          data={"model": "tiny-random", "stream": "true"}, timeout=120) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: {") and "transcript.text.delta" in line:
                    break  # the first window is decoded: leave (closing the connection)
        handle = s.service.registry.loaded["tiny-random"].model
        deadline = time.time() + 60
        while handle.scheduler.busy or s.service.admission.in_flight:
            assert time.time() < deadline
            time.sleep(0.1)
        stats = handle.scheduler.stats
        assert stats.cancelled >= 1 and stats.windows >= 1
        assert stats.windows + stats.cancelled >= 8  # every window either ran or was dropped


def test_model_flag_infers_transcribers_from_their_folders():
    from inferd.models import ModelKind
    from inferd.registry.discovery import make_spec

    w = make_spec("w", SPEECH / "whisper-tiny-random", "cli")
    assert (w.kind, w.format) == (ModelKind.TRANSCRIBER, "ctranslate2") and "translate" in w.capabilities
    c = make_spec("c", SPEECH / "wav2vec2-tiny-random", "cli")  # config.json architectures: Wav2Vec2ForCTC
    assert (c.kind, c.format) == (ModelKind.TRANSCRIBER, "onnx") and "translate" not in c.capabilities
