"""GGUF encoders on llama.cpp: an embedding GGUF under embedders/ (pooling from its metadata)
and a cross-encoder reranker GGUF under rerankers/ (rank pooling), served over HTTP and
checked against llama-cpp-python called directly in this process. Fixtures: tiny random
BERTs written by tests/gguf_bert.py into the test's tmp dir."""

from __future__ import annotations

import json

import gguf
import httpx
import llama_cpp
import numpy as np
import pytest
from llama_cpp import Llama

from tests.gguf_bert import CLS, SEP, ids, write
from tests.server import serve

QUERY = "what causes rain"
DOCS = ["rain falls from clouds", "bake the bread for forty minutes", "the stock market fell sharply today",
        "water vapour condenses"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    (root / "embedders").mkdir()
    (root / "rerankers").mkdir()
    write(root / "embedders" / "tiny-bert-cls.gguf", rank_head=False, pooling=gguf.PoolingType.CLS)
    write(root / "rerankers" / "tiny-bert-rank.gguf", rank_head=True, seed=1)
    write(root / "rerankers" / "no-head.gguf", rank_head=False, seed=2)  # an embedder put under rerankers/
    short = root / "rerankers" / "tiny-bert-short"  # the same weights, a 32-token context
    short.mkdir()
    write(short / "model.gguf", rank_head=True, seed=1)
    (short / "model_manifest.json").write_text(json.dumps({"max_length": 32}))
    return root


@pytest.fixture(scope="module")
def srv(models):
    with serve(models_dir=str(models), threads=1) as s:
        yield s


def reference_scores(path: str, pairs: list[list[int]]) -> list[float]:
    """llama.cpp's rank output for each token sequence, one sequence per decode."""
    llm = Llama(model_path=path, embedding=True, n_ctx=512, n_batch=512, n_ubatch=512,
                pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK, verbose=False)
    try:
        out = []
        for toks in pairs:
            arr = (llama_cpp.llama_token * len(toks))(*toks)
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
            assert llama_cpp.llama_decode(llm.ctx, llama_cpp.llama_batch_get_one(arr, len(toks))) == 0
            out.append(float(llama_cpp.llama_get_embeddings_seq(llm.ctx, 0)[0]))
        return out
    finally:
        llm.close()


def test_gguf_reranker_scores_equal_llama_cpp(srv, models):
    r = httpx.post(srv.url + "/ai/v1/rerank", json={"model": "tiny-bert-rank", "query": QUERY, "prompts": DOCS},
                   timeout=60)
    assert r.status_code == 200, r.text
    got = [d["score"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
    # the pair format llama-server uses for this vocabulary: [CLS] query [SEP] document [SEP]
    pairs = [[CLS, *ids(QUERY), SEP, *ids(d), SEP] for d in DOCS]
    want = reference_scores(str(models / "rerankers" / "tiny-bert-rank.gguf"), pairs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len({round(s, 4) for s in got}) == len(DOCS)  # the head sees the document: scores differ
    # the four pairs go through the batcher together, as one batch (one llama.cpp decode)
    stats = srv.service.registry.loaded["tiny-bert-rank"].model.scheduler.stats
    before = (stats.batches, stats.items)
    again = httpx.post(srv.url + "/ai/v1/rerank", json={"model": "tiny-bert-rank", "query": QUERY, "prompts": DOCS},
                       timeout=60).json()
    assert (stats.batches - before[0], stats.items - before[1]) == (1, len(DOCS))
    assert [d["score"] for d in sorted(again["data"], key=lambda d: d["index"])] == got


def test_a_long_document_is_cut_to_the_context(srv, models):
    doc = " ".join(["rain falls from clouds"] * 25)  # 100 words
    r = httpx.post(srv.url + "/ai/v1/rerank", json={"model": "tiny-bert-short", "query": QUERY, "prompts": [doc]},
                   timeout=60)
    assert r.status_code == 200, r.text
    # 32 tokens: [CLS], the query's 3, [SEP], the document's first 26, [SEP]
    pair = [CLS, *ids(QUERY), SEP, *ids(doc)[:26], SEP]
    want = reference_scores(str(models / "rerankers" / "tiny-bert-short" / "model.gguf"), [pair])
    assert r.json()["data"][0]["score"] == pytest.approx(want[0], abs=1e-4)


def test_gguf_reranker_through_the_openai_style_route(srv):
    r = httpx.post(srv.url + "/v1/rerank", json={"model": "tiny-bert-rank", "query": QUERY, "documents": DOCS},
                   timeout=60)
    assert r.status_code == 200, r.text
    assert len(r.json()["results"]) == len(DOCS)


def test_a_gguf_without_rank_pooling_is_refused_as_a_reranker(srv):
    entry = httpx.get(srv.url + "/ai/v1/models").json()["rerankers"]["no-head"]
    assert entry["capabilities"] == ["unsupported"] and "rank pooling" in entry["unsupported"]
    assert httpx.get(srv.url + "/ai/v1/models").json()["rerankers"]["tiny-bert-rank"]["capabilities"] == [
        "cross_encoder"]
    r = httpx.post(srv.url + "/ai/v1/rerank", json={"model": "no-head", "query": QUERY, "prompts": DOCS}, timeout=60)
    assert (r.status_code, r.json()["error"]) == (400, "MODEL_NOT_SUPPORTED"), r.text
    assert "rank pooling" in r.json()["message"]


def test_gguf_embedder_pools_as_its_metadata_says(srv, models):
    texts = ["what causes rain", "bake the bread"]
    r = httpx.post(srv.url + "/v1/embeddings", json={"model": "tiny-bert-cls", "input": texts}, timeout=60)
    assert r.status_code == 200, r.text
    got = np.array([d["embedding"] for d in r.json()["data"]])
    llm = Llama(model_path=str(models / "embedders" / "tiny-bert-cls.gguf"), embedding=True, n_ctx=512,
                verbose=False)
    try:
        assert llm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_CLS
        want = np.array(llm.embed(texts, normalize=True))
    finally:
        llm.close()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert got.shape == (2, 32)
