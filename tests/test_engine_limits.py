"""Engine rules are the service's, the same on every face (issue 10): stop strings and
logit_bias entries are bounded on /v1/completions, /api/generate and /ai/v1/generate alike."""

import httpx
import pytest

from tests.server import serve

TINY = "tests/fixtures/gguf/tiny-llama.gguf"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def srv():
    with serve(models=[f"tiny={TINY}"], threads=1) as s:
        yield s


def post(srv, face, stop=None, bias=None):
    if face == "openai":
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 1}
        if stop is not None:
            body["stop"] = stop
        if bias is not None:
            body["logit_bias"] = bias
        return httpx.post(srv.url + "/v1/completions", json=body, timeout=30)
    if face == "ollama":
        return httpx.post(srv.url + "/api/generate", timeout=30, json={
            "model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 1, "stop": stop or []}})
    body = {"model": "tiny", "messages": HI, "max_tokens": 1}
    if stop is not None:
        body["stop"] = stop
    if bias is not None:
        body["logit_bias"] = bias
    return httpx.post(srv.url + "/ai/v1/generate", json=body, timeout=30)


def message(r, face):
    body = r.json()
    return body["error"]["message"] if face == "openai" else body["error"] if face == "ollama" else body["message"]


@pytest.mark.parametrize("face", ["openai", "ollama", "antfly"])
def test_stop_strings_are_bounded_the_same_on_every_face(srv, face):
    assert post(srv, face, stop=[f"s{i}" for i in range(16)]).status_code == 200
    r = post(srv, face, stop=[f"s{i}" for i in range(17)])
    assert r.status_code == 400 and "at most 16 stop sequences" in message(r, face)
    r = post(srv, face, stop=["x" * 600])
    assert r.status_code == 400 and "at most 512 characters" in message(r, face)


@pytest.mark.parametrize("face", ["openai", "antfly"])
def test_logit_bias_entries_are_bounded(srv, face):
    assert post(srv, face, bias={"5": 1.0}).status_code == 200
    r = post(srv, face, bias={str(i % 200): 0.5 for i in range(200)})
    assert r.status_code == 200
    r = post(srv, face, bias={str(i): 0.5 for i in range(1025)})
    assert r.status_code == 400 and "logit_bias may have at most 1024 entries" in message(r, face)
