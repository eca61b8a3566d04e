"""Embeddings, rerank and model-based chunking over real HTTP on the tiny fixtures, through
the official `openai` and `ollama` clients and plain httpx. Numbers are compared with the
references transformers computed (tests/fixtures/onnx/*/reference.json)."""

import asyncio
import base64
import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import ollama
import openai
import pytest

from tests.server import serve

FIX = Path(__file__).parent / "fixtures"
ONNX = FIX / "onnx"
TOL = 1e-4
REF = {n: json.loads((ONNX / n / "reference.json").read_text())
       for n in ("tiny-bert-embed", "tiny-bert-rerank", "tiny-bert-splade", "tiny-bert-chunker")}
EMB = REF["tiny-bert-embed"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    colbert = tmp_path_factory.mktemp("m") / "colbert"
    shutil.copytree(ONNX / "tiny-bert-embed", colbert)
    (colbert / "model_manifest.json").write_text(json.dumps({"capabilities": ["colbert"]}))
    broken = tmp_path_factory.mktemp("m") / "broken"
    shutil.copytree(ONNX / "tiny-bert-chunker", broken)
    (broken / "model.onnx").write_bytes(b"not an onnx graph")
    models = [f"embedder:tiny-embed={ONNX / 'tiny-bert-embed'}", f"embedder:tiny-splade={ONNX / 'tiny-bert-splade'}",
              f"reranker:tiny-rerank={ONNX / 'tiny-bert-rerank'}", f"reranker:tiny-colbert={colbert}",
              f"chunker:tiny-chunker={ONNX / 'tiny-bert-chunker'}", f"chunker:broken-chunker={broken}",
              f"embedder:tiny-gguf={FIX / 'gguf' / 'tiny-llama.gguf'}"]
    with serve(models=models, threads=1) as s:
        yield s


def post(srv, path, body):
    return httpx.post(srv.url + path, json=body, timeout=60)


# ---- OpenAI ----------------------------------------------------------------------------------
def test_openai_client_embeddings_create(srv):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
    r = client.embeddings.create(model="tiny-embed", input=EMB["sentences"])  # the client asks for base64
    got = np.array([d.embedding for d in r.data])
    np.testing.assert_allclose(got, np.array(EMB["mean"]), atol=TOL)
    assert [d.index for d in r.data] == list(range(len(EMB["sentences"])))
    assert r.model == "tiny-embed" and r.usage.prompt_tokens == sum(EMB["token_counts"])
    one = client.embeddings.create(model="tiny-embed", input="what causes rain", encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, EMB["mean"][0], atol=TOL)
    short = client.embeddings.create(model="tiny-embed", input="what causes rain", dimensions=8)
    want = np.array(EMB["mean"][0][:8])
    np.testing.assert_allclose(short.data[0].embedding, want / np.linalg.norm(want), atol=TOL)
    with pytest.raises(openai.BadRequestError, match="larger than the model's 32"):
        client.embeddings.create(model="tiny-embed", input="x", dimensions=33)
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="text-embedding-3-small", input="x")


def test_openai_wire_details(srv):
    r = post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": EMB["sentences"][:2],
                                     "encoding_format": "base64"}).json()
    v = np.frombuffer(base64.b64decode(r["data"][1]["embedding"]), "<f4")
    np.testing.assert_allclose(v, EMB["mean"][1], atol=TOL)
    # token ids: one sequence, or a list of sequences; the model's [CLS]/[SEP] are added
    ids = post(srv, "/embeddings", {"model": "tiny-embed", "input": [[20, 21], [22]]}).json()
    assert len(ids["data"]) == 2 and ids["usage"]["prompt_tokens"] == 4 + 3
    bad = post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": [10**7]})
    assert bad.status_code == 400 and "vocabulary" in bad.json()["error"]["message"]
    empty = post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": ["ok", ""]})
    assert empty.status_code == 400 and "input[1] is empty" in empty.json()["error"]["message"]
    assert post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": []}).status_code == 400
    wrong_kind = post(srv, "/v1/embeddings", {"model": "tiny-rerank", "input": "x"})
    assert wrong_kind.status_code == 400 and "reranker" in wrong_kind.json()["error"]["message"]
    several = post(srv, "/v1/embeddings", {"input": "x"})  # no model, several embedders: say so
    assert several.status_code == 400 and "'model' is required" in several.json()["error"]["message"]


def test_openai_sparse_embeddings(srv):
    ref = REF["tiny-bert-splade"]
    r = post(srv, "/ai/v1/embeddings", {"model": "tiny-splade", "input": ref["sentences"][:3]}).json()
    for got, want in zip(r["data"], ref["sparse"]):
        assert got["embedding"]["indices"] == want["indices"]
        np.testing.assert_allclose(got["embedding"]["values"], want["values"], atol=TOL)
    # OpenAI's `embedding` is an array of numbers: a sparse model is a 400 pointing to /ai/v1
    for fmt in ("float", "base64"):
        b = post(srv, "/v1/embeddings", {"model": "tiny-splade", "input": "x", "encoding_format": fmt})
        assert b.status_code == 400 and "/ai/v1/embeddings" in b.json()["error"]["message"]


# ---- Ollama ----------------------------------------------------------------------------------
def test_ollama_client_embed(srv):
    client = ollama.Client(host=srv.url)
    r = client.embed(model="tiny-embed", input=EMB["sentences"][:3])
    np.testing.assert_allclose(np.array(r.embeddings), np.array(EMB["mean"][:3]), atol=TOL)
    assert r.model == "tiny-embed:latest" and r.prompt_eval_count == sum(EMB["token_counts"][:3])
    single = client.embed(model="tiny-embed", input=EMB["sentences"][0])
    np.testing.assert_allclose(single.embeddings[0], EMB["mean"][0], atol=TOL)
    legacy = client.embeddings(model="tiny-embed", prompt=EMB["sentences"][1])
    np.testing.assert_allclose(legacy.embedding, EMB["mean"][1], atol=TOL)
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model="tiny-embed", input="fox " * 100, truncate=False)
    assert e.value.status_code == 400 and "limit of 64 tokens" in str(e.value)
    assert len(client.embed(model="tiny-embed", input="fox " * 100).embeddings[0]) == 32  # truncated
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model="ghost", input="x")
    assert e.value.status_code == 404
    assert post(srv, "/api/embeddings", {"model": "tiny-embed", "prompt": ""}).json() == {"embedding": []}
    sparse = post(srv, "/api/embed", {"model": "tiny-splade", "input": "x"})
    assert sparse.status_code == 400 and "sparse" in sparse.json()["error"]


# ---- Antfly ----------------------------------------------------------------------------------
def test_antfly_embeddings_prefixes_and_formats(srv):
    q = post(srv, "/ai/v1/embeddings", {"model": "tiny-embed", "input": "rain", "task_type": "RETRIEVAL_QUERY"})
    manual = post(srv, "/ai/v1/embed", {"model": "tiny-embed", "input": "query: rain"}).json()
    assert q.status_code == 200
    np.testing.assert_allclose(q.json()["data"][0]["embedding"], manual["data"][0]["embedding"], atol=1e-6)
    d = post(srv, "/ai/v1/embed", {"model": "tiny-embed", "input": "rain", "input_type": "search_document"}).json()
    passage = post(srv, "/ai/v1/embed", {"model": "tiny-embed", "input": "passage: rain"}).json()
    np.testing.assert_allclose(d["data"][0]["embedding"], passage["data"][0]["embedding"], atol=1e-6)
    assert not np.allclose(d["data"][0]["embedding"], manual["data"][0]["embedding"])
    bad = post(srv, "/ai/v1/embed", {"model": "tiny-embed", "input": "rain", "task_type": "DANCING"})
    assert bad.status_code == 400 and bad.json()["error"] == "INVALID_REQUEST"
    b64 = post(srv, "/ai/v1/embed", {"model": "tiny-embed", "input": EMB["sentences"][0],
                                     "encoding_format": "base64", "dimensions": 16}).json()
    v = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), "<f4")
    assert v.shape == (16,) and abs(np.linalg.norm(v) - 1) < 1e-5
    too_big = post(srv, "/ai/v1/embed", {"model": "tiny-embed", "input": "x", "dimensions": 64})
    assert too_big.status_code == 400 and too_big.json()["error"] == "INVALID_REQUEST"
    sparse = post(srv, "/ai/v1/embeddings", {"model": "tiny-splade", "input": REF["tiny-bert-splade"]["sentences"][0]})
    assert sparse.json()["data"][0]["embedding"]["indices"] == REF["tiny-bert-splade"]["sparse"][0]["indices"]


def test_antfly_error_policy(srv):
    items = ["what causes rain", "", {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
             "rain falls from clouds"]
    fail = post(srv, "/ai/v1/embeddings", {"model": "tiny-embed", "input": items})
    assert fail.status_code == 400 and fail.json()["error"] in ("INVALID_REQUEST", "MODEL_NOT_SUPPORTED")
    r = post(srv, "/ai/v1/embeddings", {"model": "tiny-embed", "input": items, "error_policy": "per_item"})
    assert r.status_code == 200
    body = r.json()
    assert [d["index"] for d in body["data"]] == [0, 3]
    np.testing.assert_allclose(body["data"][1]["embedding"], EMB["mean"][1], atol=TOL)
    assert body["summary"] == {"total": 4, "succeeded": 2, "failed": 2}
    errs = {e["index"]: e for e in body["errors"]}
    assert errs[1]["code"] == "INVALID_REQUEST" and errs[1]["status"] == 400 and errs[1]["stage"] == "validate"
    assert errs[2]["code"] == "MODEL_NOT_SUPPORTED" and "image" in errs[2]["message"]
    assert errs[1]["retryable"] is False
    text_part = post(srv, "/ai/v1/embed", {"model": "tiny-embed", "input": [{"type": "text", "text": "rain falls from clouds"}]})
    np.testing.assert_allclose(text_part.json()["data"][0]["embedding"], EMB["mean"][1], atol=TOL)


def test_antfly_rerank_cross_encoder_and_colbert(srv):
    ref = REF["tiny-bert-rerank"]
    r = post(srv, "/ai/v1/rerank", {"model": "tiny-rerank", "query": ref["query"], "prompts": ref["documents"]}).json()
    assert [d["index"] for d in r["data"]] == [0, 1, 2] and r["data"][0]["object"] == "rerank.score"
    np.testing.assert_allclose([d["score"] for d in r["data"]], ref["scores"], atol=TOL)
    assert r["usage"]["prompt_tokens"] > 0 and r["usage"]["completion_tokens"] == 0
    c = post(srv, "/ai/v1/rerank", {"model": "tiny-colbert", "query": EMB["query"], "prompts": EMB["documents"]}).json()
    np.testing.assert_allclose([d["score"] for d in c["data"]], EMB["maxsim"], atol=TOL)
    assert post(srv, "/ai/v1/rerank", {"model": "ghost", "query": "q", "prompts": ["a"]}).status_code == 404
    assert post(srv, "/ai/v1/rerank", {"model": "tiny-embed", "query": "q", "prompts": ["a"]}).status_code == 400


def test_rerank_multimodal(srv):
    ref = REF["tiny-bert-rerank"]
    docs = [{"id": "a", "content": ref["documents"][0]},
            {"id": "b", "content": [{"type": "text", "text": ref["documents"][1]}]}]
    r = post(srv, "/ai/v1/rerank_multimodal", {"model": "tiny-rerank", "query": ref["query"], "documents": docs})
    np.testing.assert_allclose([d["score"] for d in r.json()["data"]], ref["scores"][:2], atol=TOL)
    docs.append({"content": [{"type": "image_url", "image_url": {"url": "https://example.invalid/x.png"}}]})
    bad = post(srv, "/ai/v1/rerank_multimodal", {"model": "tiny-rerank", "query": "q", "documents": docs})
    assert bad.status_code == 400 and "'image' capability" in bad.json()["message"]


def test_v1_rerank_sorted_with_top_n(srv):
    ref = REF["tiny-bert-rerank"]
    body = {"model": "tiny-rerank", "query": ref["query"], "documents": ref["documents"], "top_n": 2,
            "return_documents": True}
    for path in ("/v1/rerank", "/rerank"):
        r = post(srv, path, body).json()
        order = sorted(range(3), key=lambda i: -ref["scores"][i])[:2]
        assert [x["index"] for x in r["results"]] == order
        np.testing.assert_allclose([x["relevance_score"] for x in r["results"]],
                                   [ref["scores"][i] for i in order], atol=TOL)
        assert r["results"][0]["document"] == {"text": ref["documents"][order[0]]}
    plain = post(srv, "/v1/rerank", {"model": "tiny-rerank", "query": "q", "documents": [{"text": "a"}, "b"]}).json()
    assert len(plain["results"]) == 2 and "document" not in plain["results"][0]
    empty = post(srv, "/v1/rerank", {"model": "tiny-rerank", "query": " ", "documents": ["a"]})
    assert empty.status_code == 400


# ---- chunking with a token-classifier model -----------------------------------------------------
def test_model_chunker_boundaries_and_fallback(srv):
    ref = REF["tiny-bert-chunker"]
    text, probs = ref["text"], ref["boundary_probs"][1:-1]
    threshold = float(np.quantile(probs, 0.8))
    ends = sorted({ref["offsets"][1:-1][j][1] for j, p in enumerate(probs) if p > threshold})
    body = {"input": text, "config": {"model": "tiny-chunker", "threshold": threshold,
                                      "text": {"target_tokens": 500, "overlap_tokens": 0}}}
    r = post(srv, "/ai/v1/chunk", body).json()
    assert r["model"] == "tiny-chunker" and r["cache_hit"] is False
    got_ends = [c["end_char"] for c in r["data"]]
    assert got_ends[:-1] == [e for e in ends if e < len(text)][: len(got_ends) - 1]
    for c in r["data"]:
        assert text[c["start_char"]:c["end_char"]] == c["text"]
    assert post(srv, "/ai/v1/chunk", body).json()["cache_hit"] is True
    lower = post(srv, "/ai/v1/chunk", {**body, "config": {**body["config"], "threshold": 0.0}}).json()
    assert len(lower["data"]) > len(r["data"])  # every token a boundary
    capped = post(srv, "/ai/v1/chunk", {**body, "config": {**body["config"], "threshold": 0.0, "max_chunks": 3}})
    assert len(capped.json()["data"]) == 3
    fb = post(srv, "/ai/v1/chunk", {"input": text, "config": {"model": "broken-chunker"}})
    assert fb.status_code == 200 and fb.json()["model"] == "fixed" and fb.json()["data"][0]["text"] == text


# ---- batching, GGUF ------------------------------------------------------------------------------
def test_concurrent_requests_are_batched(srv):
    async def many():
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
            rs = await asyncio.gather(*(c.post("/v1/embeddings", json={"model": "tiny-embed", "input": s,
                                                                       "encoding_format": "float"})
                                        for s in EMB["sentences"] * 6))
        return [r.json()["data"][0]["embedding"] for r in rs]

    post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": "warm"})
    rt = srv.service.registry.loaded["tiny-embed"].model
    batcher = rt.scheduler
    # settings reach the runtime: --threads 1, default --max-batch-tokens / --max-batch-size
    assert rt.runtime.session.sess.get_session_options().intra_op_num_threads == 1
    assert (batcher.max_tokens, batcher.max_items) == (8192, 512)
    before = (batcher.stats.batches, batcher.stats.items)
    vecs = asyncio.run(many())
    np.testing.assert_allclose(np.array(vecs), np.array(EMB["mean"] * 6), atol=TOL)
    batches, items = batcher.stats.batches - before[0], batcher.stats.items - before[1]
    assert items == 36 and batches < 36  # forward passes were shared


def test_gguf_embedder_matches_llama_cpp(srv):
    from llama_cpp import LLAMA_POOLING_TYPE_MEAN, Llama

    r = post(srv, "/v1/embeddings", {"model": "tiny-gguf", "input": ["hello world", "a b c"],
                                     "encoding_format": "float"}).json()
    got = np.array([d["embedding"] for d in r["data"]])
    llm = Llama(model_path=str(FIX / "gguf" / "tiny-llama.gguf"), embedding=True, n_ctx=512,
                pooling_type=LLAMA_POOLING_TYPE_MEAN, verbose=False)  # a generative GGUF: mean pooling
    want = np.array(llm.embed(["hello world", "a b c"], normalize=False))
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=TOL)
    assert abs(np.linalg.norm(got[0]) - 1) < 1e-5 and r["usage"]["prompt_tokens"] > 0
    llm.close()
