"""openai-server's rule: a server with no embedder but a GGUF generator embeds with that
generator (llama.cpp's embedding mode; pooling from the GGUF's metadata, mean when it says
none, as the tiny llama fixture does), on /v1/embeddings, Ollama /api/embed and
/api/embeddings, by the generator's name or with `model` omitted. The vectors equal
llama-cpp-python's own in-process embeddings; an unknown model stays a 404, and where an
embedder is configured a generator's name stays the 400 it was."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.conftest import FIXTURES
from tests.server import serve

llama_cpp = pytest.importorskip("llama_cpp")

TINY = FIXTURES / "gguf" / "tiny-llama.gguf"
EMBED = FIXTURES / "onnx" / "tiny-bert-embed"
TEXTS = ["what causes rain", "bake the bread at dawn"]
TOL = 1e-4


@pytest.fixture(scope="module")
def want() -> np.ndarray:
    llm = llama_cpp.Llama(model_path=str(TINY), embedding=True, n_ctx=512, verbose=False,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN)
    try:
        return np.array(llm.embed(TEXTS, normalize=True))
    finally:
        llm.close()


@pytest.fixture(scope="module")
def srv():
    with serve(models=[f"tiny={TINY}"], threads=1) as s:
        yield s


def post(srv, path, body):
    return httpx.post(srv.url + path, json=body, timeout=120)


def test_v1_embeddings_by_name_and_omitted(srv, want):
    for body in ({"model": "tiny", "input": TEXTS}, {"input": TEXTS}):
        r = post(srv, "/v1/embeddings", body)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "tiny"
        got = np.array([d["embedding"] for d in r.json()["data"]])
        np.testing.assert_allclose(got, want, atol=TOL)
        assert r.json()["usage"]["prompt_tokens"] > 0
    # the generator still generates, and no catalog lists the embedding twin as a model of its own
    g = post(srv, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 2})
    assert g.status_code == 200, g.text
    ids = [m["id"] for m in httpx.get(srv.url + "/v1/models").json()["data"]]
    assert ids == ["tiny"]


def test_ollama_embed_and_legacy_embeddings(srv, want):
    r = post(srv, "/api/embed", {"model": "tiny", "input": TEXTS})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "tiny:latest"  # Ollama's name:tag spelling of the served name
    np.testing.assert_allclose(np.array(r.json()["embeddings"]), want, atol=TOL)
    r = post(srv, "/api/embeddings", {"model": "tiny", "prompt": TEXTS[1]})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(np.array(r.json()["embedding"]), want[1], atol=TOL)


def test_unknown_model_stays_404(srv):
    for path, body in (("/v1/embeddings", {"model": "ghost", "input": "x"}),
                       ("/api/embed", {"model": "ghost", "input": "x"}),
                       ("/api/embeddings", {"model": "ghost", "prompt": "x"})):
        assert post(srv, path, body).status_code == 404, path


def test_a_configured_embedder_keeps_generators_out():
    with serve(models=[f"tiny={TINY}", f"embedder:tiny-embed={EMBED}"], threads=1) as s:
        r = post(s, "/v1/embeddings", {"model": "tiny", "input": "x"})
        assert r.status_code == 400 and "generator" in r.json()["error"]["message"], r.text
        r = post(s, "/v1/embeddings", {"input": "x"})  # omitted: the only embedder, as before
        assert r.status_code == 200 and r.json()["model"] == "tiny-embed"
