"""Image embeddings on a CLIP-style dual encoder (tiny fixture, briefly trained on colour
swatches; reference vectors from transformers): /ai/v1/embed(dings) with image parts,
per-item errors for bad images, and /ai/v1/rerank_multimodal over image and mixed documents."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures as cf
import json
import shutil

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.runtimes.onnx.clip import ClipEmbedder
from tests.conftest import FIXTURES
from tests.server import serve
from tests.vision_helpers import data_uri, encode

CLIP = FIXTURES / "vision" / "clip-tiny"
REF = json.loads((CLIP / "reference.json").read_text())
IMAGES = [Image.open(CLIP / f).convert("RGB") for f in REF["images"]]  # gradient, drawing, red, blue
RED, BLUE = 2, 3
TOL = 1e-4


def test_runtime_equals_reference_in_mixed_batches():
    rt = ClipEmbedder("clip-tiny", CLIP, {}, threads=1)
    items = [rt.prepare_image(np.asarray(im)) for im in IMAGES] + rt.prepare(REF["texts"])
    out = rt.run_batch(items[::-1])[::-1]  # texts first this time, padded together
    np.testing.assert_allclose(np.stack(out[:4]), REF["image_embeddings"], atol=TOL)
    np.testing.assert_allclose(np.stack(out[4:]), REF["text_embeddings"], atol=TOL)
    assert rt.dims == 16


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    shutil.copytree(CLIP, models / "embedders" / "clip-tiny")
    with serve(models_dir=str(models), threads=1, max_image_dimension=512) as s:
        yield s


def post(srv, path, body):
    return httpx.post(srv.url + path, json=body, timeout=60)


def _img_part(i, fmt="PNG"):
    return {"type": "image_url", "image_url": {"url": data_uri(IMAGES[i], fmt)}}


def test_catalog_says_image_input(srv):
    e = httpx.get(srv.url + "/ai/v1/models").json()["embedders"]["clip-tiny"]
    assert e["inputs"] == ["text", "image"] and "image" in e["capabilities"]


def test_embed_texts_and_images_in_one_space(srv):
    media = {"type": "media", "data": base64.b64encode(encode(IMAGES[BLUE])).decode(), "mime_type": "image/png"}
    body = {"model": "clip-tiny", "input": [REF["texts"][0], _img_part(RED), media, [_img_part(0)]]}
    for path in ("/ai/v1/embed", "/ai/v1/embeddings"):
        r = post(srv, path, body)
        assert r.status_code == 200, r.text
        v = np.array([d["embedding"] for d in r.json()["data"]])
        np.testing.assert_allclose(v[0], REF["text_embeddings"][0], atol=TOL)
        np.testing.assert_allclose(v[1:], np.array(REF["image_embeddings"])[[RED, BLUE, 0]], atol=TOL)
        assert v[0] @ v[1] > v[0] @ v[2] + 0.3  # "a photo of a red square": the red image, not the blue one
        assert r.json()["usage"]["prompt_tokens"] == 8  # text tokens only


def test_dimensions_truncate_image_vectors(srv):
    r = post(srv, "/ai/v1/embed", {"model": "clip-tiny", "input": [_img_part(RED)], "dimensions": 8})
    v = np.array(r.json()["data"][0]["embedding"])
    assert v.shape == (8,) and abs(np.linalg.norm(v) - 1) < 1e-5


def test_bad_images_per_item_and_fail_fast(srv):
    items = [REF["texts"][2], {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
             _img_part(RED, "JPEG"), {"type": "media", "data": "!!notbase64!!", "mime_type": "image/png"},
             {"type": "image_url", "image_url": {"url": data_uri(Image.new("RGB", (600, 10)))}},
             [{"type": "text", "text": "red"}, _img_part(RED)]]
    fail = post(srv, "/ai/v1/embed", {"model": "clip-tiny", "input": items})
    assert fail.status_code == 400 and fail.json()["error"] == "INVALID_REQUEST"
    r = post(srv, "/ai/v1/embed", {"model": "clip-tiny", "input": items, "error_policy": "per_item"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["index"] for d in body["data"]] == [0, 2]
    assert body["summary"] == {"total": 6, "succeeded": 2, "failed": 4}
    errs = {e["index"]: e for e in body["errors"]}
    assert errs[1]["status"] == 400 and "not a readable image" in errs[1]["message"]
    assert errs[3]["status"] == 400 and "base64" in errs[3]["message"]
    assert errs[4]["status"] == 413 and "512" in errs[4]["message"]
    assert errs[5]["status"] == 400 and "mixes" in errs[5]["message"]
    assert srv.service.media.held == 0


def test_too_large_image_is_413_before_loading(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(CLIP, models / "embedders" / "clip-tiny")
    with serve(models_dir=str(models), max_image_dimension=64) as s:
        r = post(s, "/ai/v1/embed", {"model": "clip-tiny",
                                     "input": [{"type": "image_url", "image_url": {"url": data_uri(Image.new("RGB", (65, 9)))}}]})
        assert r.status_code == 413 and s.service.registry.loaded == {}


def test_rerank_multimodal_orders_matching_image_first(srv):
    docs = [{"id": "blue", "content": [_img_part(BLUE)]},
            {"id": "red", "content": [_img_part(RED)]},
            {"id": "mixed", "content": [{"type": "text", "text": "a photo of a blue square"}, _img_part(BLUE)]},
            {"id": "text", "content": "a photo of a red square"}]
    r = post(srv, "/ai/v1/rerank_multimodal", {"model": "clip-tiny", "query": REF["texts"][0], "documents": docs})
    assert r.status_code == 200, r.text
    scores = [d["score"] for d in r.json()["data"]]
    q, img = np.array(REF["text_embeddings"][0]), np.array(REF["image_embeddings"])
    np.testing.assert_allclose(scores[:2], [q @ img[BLUE], q @ img[RED]], atol=TOL)
    assert scores[1] > scores[0] + 0.3 and scores[1] > scores[2]
    assert abs(scores[3] - 1.0) < 1e-4  # the query itself as a text document
    bad = post(srv, "/ai/v1/rerank_multimodal", {"model": "ghost", "query": "q", "documents": docs})
    assert bad.status_code == 404


def test_concurrent_image_requests_share_batches(srv):
    def one(i):
        r = post(srv, "/ai/v1/embed", {"model": "clip-tiny", "input": [_img_part(i % 4)] * 3})
        assert r.status_code == 200
        return np.array(r.json()["data"][0]["embedding"])

    with cf.ThreadPoolExecutor(6) as pool:
        vecs = list(pool.map(one, range(12)))
    for i, v in enumerate(vecs):
        np.testing.assert_allclose(v, REF["image_embeddings"][i % 4], atol=TOL)

    # Three requests' images waiting together go through the model in ONE forward pass.
    handle = srv.service.registry.loaded["clip-tiny"].model
    rt, batcher = handle.runtime, handle.scheduler
    items = [rt.prepare_image(np.asarray(im)) for im in IMAGES]

    async def three_requests():
        before = batcher.stats.batches
        outs = await asyncio.gather(*(batcher.submit_each(items[k:k + 2], [len(x) for x in items[k:k + 2]])
                                      for k in (0, 1, 2)))
        return batcher.stats.batches - before, outs

    n_batches, outs = srv.call(three_requests())
    assert n_batches == 1
    np.testing.assert_allclose(outs[2][1], REF["image_embeddings"][3], atol=TOL)
