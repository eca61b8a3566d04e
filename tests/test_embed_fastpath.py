"""The fast embedding path (issue 18): orjson responses straight from float32 arrays, the
one-task disconnect watch, non-spinning encoder sessions. The values must be the model's own
(the raw onnxruntime session's vectors), every face must agree bit for bit, and bad input
must keep its status and envelope. Slow only because it loads the real built-in MiniLM."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
from starlette.requests import Request

from inferd.api.fastjson import FastJSONResponse, dumps
from inferd.api.streaming import cancel_on_disconnect
from inferd.errors import Cancelled
from tests.server import serve

pytestmark = pytest.mark.slow
MODEL = "all-MiniLM-L6-v2"
TEXTS = ["A man is eating food.", "Rain forms when water vapour condenses.", "Ünïcödé text, déjà vu — 東京"]


@pytest.fixture(scope="module")
def srv():
    with serve(builtins=True) as s:
        yield s


def _raw_session_vectors(texts: list[str]) -> np.ndarray:
    """The peer: a plain onnxruntime session on the same file, mean pooled, L2-normalised."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from inferd.registry.builtins import minilm_int8_embedder

    spec = minilm_int8_embedder()
    sess = ort.InferenceSession(str(spec.path), providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(spec.manifest["tokenizer"])
    tok.enable_truncation(256)
    tok.enable_padding()
    encs = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encs], np.int64)
    mask = np.array([e.attention_mask for e in encs], np.int64)
    h = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _b64(s: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<f4")


def test_float_json_is_the_models_float32_values(srv):
    c = httpx.Client(base_url=srv.url, timeout=60)
    r = c.post("/v1/embeddings", json={"model": MODEL, "input": TEXTS})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["object"] == "list" and body["model"] == MODEL
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    assert [d["index"] for d in body["data"]] == [0, 1, 2] and {d["object"] for d in body["data"]} == {"embedding"}
    floats = np.array([d["embedding"] for d in body["data"]])
    assert floats.shape == (3, 384)
    b64 = c.post("/v1/embeddings", json={"model": MODEL, "input": TEXTS, "encoding_format": "base64"}).json()
    exact = np.stack([_b64(d["embedding"]) for d in b64["data"]])
    # Each number reads back as exactly the float32 the model produced (what base64 carries).
    assert np.array_equal(floats.astype(np.float32), exact)
    raw = _raw_session_vectors(TEXTS)
    cos = (floats * raw).sum(1) / np.linalg.norm(floats, axis=1) / np.linalg.norm(raw, axis=1)
    assert cos.min() > 0.9999, cos


def test_every_face_answers_the_same_floats(srv):
    c = httpx.Client(base_url=srv.url, timeout=60)
    ref = np.stack([_b64(d["embedding"]) for d in c.post("/v1/embeddings", json={
        "model": MODEL, "input": TEXTS, "encoding_format": "base64"}).json()["data"]])
    ollama = c.post("/api/embed", json={"model": MODEL, "input": TEXTS}).json()
    assert ollama["prompt_eval_count"] > 0 and ollama["total_duration"] > 0
    assert np.array_equal(np.array(ollama["embeddings"], dtype=np.float32), ref)
    legacy = c.post("/api/embeddings", json={"model": MODEL, "prompt": TEXTS[1]}).json()
    assert np.array_equal(np.array(legacy["embedding"], dtype=np.float32), ref[1])
    antfly = c.post("/ai/v1/embeddings", json={"model": MODEL, "input": TEXTS}).json()
    assert np.array_equal(np.array([d["embedding"] for d in antfly["data"]], dtype=np.float32), ref)
    dims = c.post("/v1/embeddings", json={"model": MODEL, "input": TEXTS[0], "dimensions": 8}).json()
    v = np.array(dims["data"][0]["embedding"])
    assert v.shape == (8,) and abs(np.linalg.norm(v) - 1) < 1e-5
    assert np.allclose(v, ref[0][:8] / np.linalg.norm(ref[0][:8]), atol=1e-6)


def test_fast_encoder_writes_what_json_dumps_would():
    content = {"model": "m", "text": "déjà vu — 東京 \u2028", "n": 3, "none": None, "ok": True,
               "nested": [{"i": 1, "x": 0.5}], "vec": np.array([0.1, -2.5, 3e-8], dtype=np.float32)}
    parsed = json.loads(dumps(content))
    assert parsed["vec"] == pytest.approx([0.1, -2.5, 3e-8], rel=1e-6)
    assert np.array_equal(np.array(parsed["vec"], dtype=np.float32), content["vec"])
    assert {k: v for k, v in parsed.items() if k != "vec"} == {k: v for k, v in content.items() if k != "vec"}
    r = FastJSONResponse({"a": np.zeros(2, np.float32)})
    assert r.body == b'{"a":[0.0,0.0]}' and r.media_type == "application/json"


@pytest.mark.parametrize("path,body,status", [
    ("/v1/embeddings", {"model": MODEL, "input": ""}, 400),
    ("/v1/embeddings", {"model": MODEL, "input": []}, 400),
    ("/v1/embeddings", {"model": MODEL, "input": "word " * 400}, 400),  # too long, truncation off
    ("/v1/embeddings", {"model": MODEL, "input": "x", "dimensions": 385}, 400),
    ("/v1/embeddings", {"model": MODEL, "input": "x", "encoding_format": "hex"}, 400),
    ("/v1/embeddings", {"model": MODEL, "input": [1, "a"]}, 400),
    ("/v1/embeddings", {"model": "no-such-model", "input": "x"}, 404),
    ("/v1/embeddings", {"model": MODEL, "input": ["x"] * 5000}, 413),  # --max-batch-inputs
    ("/api/embed", {"model": MODEL, "input": ""}, 400),
    ("/api/embed", {"model": MODEL, "input": "word " * 400, "truncate": False}, 400),
    ("/api/embed", {"model": "no-such-model", "input": "x"}, 404),
    ("/ai/v1/embeddings", {"model": MODEL, "input": ""}, 400),
    ("/ai/v1/embeddings", {"model": MODEL, "input": "x", "task_type": "NOPE"}, 400),
])
def test_bad_input_keeps_its_status_and_envelope(srv, path, body, status):
    r = httpx.post(srv.url + path, json=body, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()
    if path.startswith("/v1/"):
        assert isinstance(err["error"]["message"], str) and err["error"]["type"]
    elif path.startswith("/api/"):
        assert isinstance(err["error"], str) and err["error"]
    else:
        assert isinstance(err["error"], str) and err["message"]


def test_malformed_json_is_a_400_in_each_envelope(srv):
    for path in ("/v1/embeddings", "/api/embed", "/ai/v1/embeddings"):
        r = httpx.post(srv.url + path, content=b'{"model": "x", "input": ', timeout=30,
                       headers={"content-type": "application/json"})
        assert r.status_code == 400 and "malformed JSON" in json.dumps(r.json()), (path, r.text)


def test_encoder_sessions_do_not_spin(srv):
    httpx.post(srv.url + "/v1/embeddings", json={"model": MODEL, "input": "load it"}, timeout=60)
    rt = srv.service.registry.loaded[MODEL].model.runtime
    opts = rt.session.sess.get_session_options()
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"


# ---- cancel_on_disconnect: the request's own task runs the work -----------------------------
def _request(messages: asyncio.Queue) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, messages.get)


def test_cancel_on_disconnect_returns_cancels_and_passes_outside_cancels_on():
    async def scenario():
        q: asyncio.Queue = asyncio.Queue()
        assert await cancel_on_disconnect(_request(q), asyncio.sleep(0.01, "done")) == "done"

        started, cancelled = asyncio.Event(), asyncio.Event()

        async def long_work():
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        q2: asyncio.Queue = asyncio.Queue()
        leaving = asyncio.ensure_future(leave_from(q2, started))
        with pytest.raises(Cancelled):
            await cancel_on_disconnect(_request(q2), long_work())
        await leaving
        assert cancelled.is_set()

        # A cancel from outside (server shutdown) stays a CancelledError, not Cancelled.
        started.clear()
        q3: asyncio.Queue = asyncio.Queue()
        task = asyncio.ensure_future(cancel_on_disconnect(_request(q3), long_work()))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def leave_from(q: asyncio.Queue, started: asyncio.Event):
        await started.wait()
        await q.put({"type": "http.disconnect"})

    asyncio.run(asyncio.wait_for(scenario(), 10))
