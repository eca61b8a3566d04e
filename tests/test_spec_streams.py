"""GenAIServer's stream extensions where inferd lacked them (issue 27): ttft and tps in
audio and Ollama stream chunks (eval_count as the Ollama token count), and the ASR
confidence per segment. Real models: the random-weight Whisper and wav2vec2 fixtures, the
tiny GGUF."""

import json
import math

import httpx

from tests.server import serve
from tests.test_speech_http import CLIPS, GREEDY, client, post, srv  # noqa: F401


def test_audio_stream_chunks_carry_ttft_tps_and_confidence(srv):  # noqa: F811
    with open(CLIPS / "fox.wav", "rb") as f:
        r = post(srv, "/v1/audio/transcriptions", files={"file": ("fox.wav", f)},
                 data={"model": "tiny-random", "stream": "true", "beam_size": "1", "temperature_fallback": "false"})
    assert r.status_code == 200
    events = [json.loads(ln[6:]) for ln in r.text.split("\n") if ln.startswith("data: {")]
    deltas = [e for e in events if e["type"] == "transcript.text.delta"]
    assert deltas and deltas[0]["ttft"] > 0 and all("ttft" not in d for d in deltas[1:])
    assert all(d["tps"] >= 0 for d in deltas) and all(0 < d["confidence"] <= 1 for d in deltas)
    done = events[-1]
    assert done["type"] == "transcript.text.done" and done["ttft"] == deltas[0]["ttft"] and done["tps"] > 0
    # CTC has no per-segment probability: no confidence is made up
    with open(CLIPS / "fox.wav", "rb") as f:
        r = post(srv, "/v1/audio/transcriptions", files={"file": ("fox.wav", f)},
                 data={"model": "facebook/w2v-tiny", "stream": "true"})
    deltas = [json.loads(ln[6:]) for ln in r.text.split("\n") if ln.startswith("data: {") and "delta\"" in ln]
    assert deltas and all("confidence" not in d and "tps" in d for d in deltas)


def test_verbose_segments_carry_confidence(client):  # noqa: F811
    v = client.audio.transcriptions.create(model="tiny-random", file=open(CLIPS / "walk.flac", "rb"),
                                           response_format="verbose_json", extra_body=GREEDY)
    assert v.segments
    for s in v.segments:
        assert abs(s.model_extra["confidence"] - math.exp(s.avg_logprob)) < 1e-5


def test_ollama_stream_chunks_carry_tps_and_eval_count():
    with serve(models=["tiny=tests/fixtures/gguf/tiny-llama.gguf"], threads=1, parallel=1) as s:
        for path, body in (("/api/generate", {"prompt": "hi"}),
                           ("/api/chat", {"messages": [{"role": "user", "content": "hi"}]})):
            with httpx.stream("POST", s.url + path, json={"model": "tiny", "options": {"num_predict": 6,
                                                                                       "temperature": 0}, **body}) as r:
                lines = [json.loads(x) for x in r.iter_lines() if x]
            parts = [x for x in lines if not x["done"]]
            assert parts and "ttft" in parts[0] and all("ttft" not in x for x in parts[1:])
            assert all(x["tps"] >= 0 for x in parts)
            counts = [x["eval_count"] for x in parts]
            assert counts == sorted(counts) and counts[-1] <= 6 and lines[-1]["eval_count"] == 6
