"""Late-interaction image reranking (ColPali-style) beside CLIP's cosine: the tiny random-weight
ColPaliForRetrieval of scripts/make_tiny_colvision.py, exported to ONNX, whose reference
embeddings and `ColPaliProcessor.score_retrieval` scores transformers wrote. inferd builds the
processor's prompts and preprocessing itself (no torch, no transformers) and must give the
same token ids, pixels and MaxSim scores; over real HTTP it ranks page images and refuses what
the model cannot score."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures as cf
import io
import json
import shutil

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.runtimes.onnx.colvision import ColVisionReranker
from tests.conftest import FIXTURES

COLPALI = FIXTURES / "vision" / "colpali-tiny"
RERANK = FIXTURES / "onnx" / "tiny-bert-rerank"
REF = json.loads((COLPALI / "reference.json").read_text())
IMAGES = [np.asarray(Image.open(COLPALI / f"image{i}.png").convert("RGB")) for i in range(3)]
TOL = 1e-4


def _page(i: int) -> dict:
    data = base64.b64encode((COLPALI / f"image{i}.png").read_bytes()).decode()
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def test_runtime_equals_transformers():
    rt = ColVisionReranker("colpali-tiny", COLPALI, threads=1)
    queries = [rt.prepare_query(q) for q in REF["queries"]]
    assert [list(q.ids) for q in queries] == REF["query_input_ids"]  # the processor's prompt, token for token
    assert rt.image_ids.tolist() == REF["image_input_ids"]  # 16 <image> tokens, <bos>, the visual prompt
    pages = [rt.prepare_image(x) for x in IMAGES]
    for p, mean, first in zip(pages, REF["pixel_values_mean"], REF["pixel_values_first"]):
        assert p.pixels.shape == (3, 32, 32)
        assert abs(float(p.pixels.astype(np.float64).mean()) - mean) < 1e-6
        np.testing.assert_allclose(p.pixels[:, 0, :4].ravel(), first, atol=1e-6)
    out = rt.run_batch(pages[::-1] + queries[::-1])[::-1]  # pages first this time, queries padded together
    qv, iv = out[:2], out[2:]
    for v, want in zip(qv, REF["query_embeddings_first"]):
        np.testing.assert_allclose(v[:, :4].ravel(), want, atol=TOL)
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)  # normalised per token
    for v, want in zip(iv, REF["image_embeddings_first"]):
        assert v.shape == (21, 32)  # 16 patches + <bos> + "Describe the image." + "\n"
        np.testing.assert_allclose(v[:, :4].ravel(), want, atol=TOL)
    scores = [[rt.score(q, [p]) for p in iv] for q in qv]
    np.testing.assert_allclose(scores, REF["scores"], atol=TOL)
    # a document of two pages: MaxSim over the union of their vectors, at least each page's own
    both = rt.score(qv[0], [iv[0], iv[2]])
    assert both >= max(scores[0][0], scores[0][2]) - 1e-6


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    from tests.server import serve

    models = tmp_path_factory.mktemp("models")
    shutil.copytree(COLPALI, models / "rerankers" / "colpali-tiny")
    shutil.copytree(RERANK, models / "rerankers" / "tiny-rerank")
    with serve(models_dir=str(models), threads=1, max_image_dimension=512) as s:
        yield s


def post(srv, path, body):
    return httpx.post(srv.url + path, json=body, timeout=60)


def test_catalog_lists_an_image_reranker(srv):
    r = httpx.get(srv.url + "/ai/v1/models").json()["rerankers"]
    assert r["colpali-tiny"]["inputs"] == ["text", "image"]
    assert {"late_interaction", "image"} <= set(r["colpali-tiny"]["capabilities"])
    assert r["tiny-rerank"]["inputs"] == ["text"]


def test_rerank_multimodal_scores_and_order_over_http(srv):
    docs = [{"id": f"page{i}", "content": [_page(i)]} for i in range(3)]
    for qi, query in enumerate(REF["queries"]):
        r = post(srv, "/ai/v1/rerank_multimodal", {"model": "colpali-tiny", "query": query, "documents": docs})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == "colpali-tiny" and [d["index"] for d in body["data"]] == [0, 1, 2]
        scores = [d["score"] for d in body["data"]]
        np.testing.assert_allclose(scores, REF["scores"][qi], atol=TOL)
        assert np.argsort(scores).tolist() == np.argsort(REF["scores"][qi]).tolist()  # the ranking
        assert body["usage"]["prompt_tokens"] == len(REF["query_input_ids"][qi])
    assert np.argmax(REF["scores"][0]) != np.argmax(REF["scores"][1])  # the two queries rank differently


def test_bad_image_is_400(srv):
    docs = [{"content": [_page(0)]}, {"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    r = post(srv, "/ai/v1/rerank_multimodal", {"model": "colpali-tiny", "query": "q", "documents": docs})
    assert r.status_code == 400 and r.json()["error"] == "INVALID_REQUEST", r.text
    assert "not a readable image" in r.json()["message"]


def test_image_document_to_a_text_reranker_is_400_naming_why(srv):
    docs = [{"content": "a text page"}, {"content": [_page(1)]}]
    r = post(srv, "/ai/v1/rerank_multimodal", {"model": "tiny-rerank", "query": "q", "documents": docs})
    assert r.status_code == 400, r.text
    msg = r.json()["message"]
    assert "'tiny-rerank' scores text only" in msg and "late-interaction image reranker" in msg


def test_text_documents_to_the_image_reranker_are_400(srv):
    mixed = [{"content": [{"type": "text", "text": "caption"}, _page(0)]}]
    r = post(srv, "/ai/v1/rerank_multimodal", {"model": "colpali-tiny", "query": "q", "documents": mixed})
    assert r.status_code == 400 and "documents[0] has a text part" in r.json()["message"], r.text
    for path, key in (("/ai/v1/rerank", "prompts"), ("/v1/rerank", "documents")):
        r = post(srv, path, {"model": "colpali-tiny", "query": "q", key: ["a page of text"]})
        assert r.status_code == 400 and "image reranker" in r.text, r.text
    r = post(srv, "/ai/v1/rerank_multimodal", {"model": "colpali-tiny", "query": " ", "documents": [{"content": [_page(0)]}]})
    assert r.status_code == 400 and "query" in r.json()["message"]


def test_v1_rerank_takes_image_documents(srv):
    """/v1/rerank with Jina's `{"image": ...}` documents: sorted results, the same scores."""
    pages = [{"image": _page(i)["image_url"]["url"]} for i in range(3)]
    pages[2] = {"image": base64.b64encode((COLPALI / "image2.png").read_bytes()).decode()}  # bare base64
    r = post(srv, "/v1/rerank", {"model": "colpali-tiny", "query": REF["queries"][0], "documents": pages,
                                 "top_n": 2, "return_documents": True})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    order = np.argsort(REF["scores"][0])[::-1][:2].tolist()
    assert [x["index"] for x in results] == order
    np.testing.assert_allclose([x["relevance_score"] for x in results], np.array(REF["scores"][0])[order], atol=TOL)
    assert results[0]["document"] == pages[order[0]]
    bad = post(srv, "/v1/rerank", {"model": "tiny-rerank", "query": "q", "documents": pages})
    assert bad.status_code == 400 and "scores text only" in bad.json()["error"]["message"], bad.text
    both = post(srv, "/v1/rerank", {"model": "colpali-tiny", "query": "q", "documents": [{"text": "a", "image": "b"}]})
    assert both.status_code == 400 and "exactly one" in both.json()["error"]["message"]


def test_concurrent_requests_share_batches(srv):
    def one(i):
        q = REF["queries"][i % 2]
        docs = [{"content": [_page(k)]} for k in range(3)]
        r = post(srv, "/ai/v1/rerank_multimodal", {"model": "colpali-tiny", "query": q, "documents": docs})
        assert r.status_code == 200, r.text
        return [d["score"] for d in r.json()["data"]]

    with cf.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(one, range(8)))
    for i, scores in enumerate(got):  # whatever batch a request's pages shared, its scores are its own
        np.testing.assert_allclose(scores, REF["scores"][i % 2], atol=TOL)

    # queries and pages of three requests waiting together: ONE pass of the batcher
    handle = srv.service.registry.loaded["colpali-tiny"].model
    rt, batcher = handle.runtime, handle.scheduler
    items = [rt.prepare_query(REF["queries"][0]), rt.prepare_image(IMAGES[0]), rt.prepare_image(IMAGES[1])]

    async def three_requests():
        before = batcher.stats.batches
        outs = await asyncio.gather(*(batcher.submit_each(items, [len(x) for x in items]) for _ in range(3)))
        return batcher.stats.batches - before, outs

    n_batches, outs = srv.call(three_requests())
    assert n_batches == 1
    for q, p0, p1 in outs:
        np.testing.assert_allclose([rt.score(q, [p0]), rt.score(q, [p1])], REF["scores"][0][:2], atol=TOL)


def test_too_large_image_is_413_before_loading(tmp_path):
    from tests.server import serve

    models = tmp_path / "models"
    shutil.copytree(COLPALI, models / "rerankers" / "colpali-tiny")
    big = Image.new("RGB", (65, 9))
    buf = io.BytesIO()
    big.save(buf, "PNG")
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()}}
    with serve(models_dir=str(models), max_image_dimension=64) as s:
        r = post(s, "/ai/v1/rerank_multimodal", {"model": "colpali-tiny", "query": "q", "documents": [{"content": [part]}]})
        assert r.status_code == 413 and s.service.registry.loaded == {}, r.text


def test_given_by_hand_without_a_manifest_is_an_image_reranker(tmp_path):
    from inferd.registry.discovery import discover

    folder = shutil.copytree(COLPALI, tmp_path / "cp")
    (folder / "model_manifest.json").unlink()  # config.json's ColPaliForRetrieval says reranker
    spec = discover(tmp_path / "none", tmp_path / "none", [f"cp={folder}"]).specs[0]
    assert spec.kind == "reranker" and {"late_interaction", "image"} <= spec.capabilities
