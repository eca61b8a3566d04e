"""The framework-free embeddings route (api/fast_lane.py, issue 31): a well-formed
POST /v1/embeddings is answered without FastAPI's router, everything else goes on to FastAPI
with its body intact, and every middleware in front (auth, body limit, metrics, request id)
still applies. Slow only because it loads the real built-in MiniLM."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from inferd.api.fast_lane import FastLane, embedding_lanes
from tests.server import serve

pytestmark = pytest.mark.slow
MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def srv():
    with serve(builtins=True, max_body_bytes=4096) as s:
        yield s


def post(srv, body, path="/v1/embeddings", **kw):
    return httpx.post(srv.url + path, content=body, timeout=60, **kw)


class Inner:
    """The app behind the lane: records what reached it and answers 299."""

    def __init__(self):
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send):
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        self.bodies.append(b"".join(chunks))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"inner"})


def call_lane(srv, inner: Inner, body: bytes, path="/v1/embeddings", ctype=b"application/json"):
    lane = FastLane(inner, srv.service, embedding_lanes())
    scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"content-type", ctype)],
             "query_string": b"", "root_path": "", "scheme": "http", "server": ("127.0.0.1", 80),
             "client": ("127.0.0.1", 1), "http_version": "1.1", "asgi": {"version": "3.0"}}
    got: list[dict] = []
    pending = [{"type": "http.request", "body": body[:7], "more_body": True},
               {"type": "http.request", "body": body[7:], "more_body": False}]

    async def receive():
        if pending:
            return pending.pop(0)
        await asyncio.sleep(3600)  # the client stays connected

    async def send(message):
        got.append(message)

    srv.call(lane(scope, receive, send), timeout=60)
    return got[0]["status"], b"".join(m.get("body", b"") for m in got[1:])


def test_a_well_formed_request_never_reaches_the_framework(srv):
    inner = Inner()
    status, body = call_lane(srv, inner, b'{"model": "%s", "input": ["a cat", "a dog"]}' % MODEL.encode())
    assert status == 200 and inner.bodies == []
    assert body.count(b'"embedding":[') == 2


@pytest.mark.parametrize("body,path,ctype", [
    (b'{"model": "x", "input": ', "/v1/embeddings", b"application/json"),        # malformed JSON
    (b'{"model": "%s"}' % MODEL.encode(), "/v1/embeddings", b"application/json"),  # no input
    (b'{"model": "%s", "input": "a"}' % MODEL.encode(), "/v1/embeddings", b"text/plain"),  # not JSON
    (b'{"model": "%s", "input": "a"}' % MODEL.encode(), "/v1/rerank", b"application/json"),  # another route
])
def test_everything_else_reaches_the_framework_with_its_body_intact(srv, body, path, ctype):
    inner = Inner()
    status, out = call_lane(srv, inner, body, path, ctype)
    assert (status, out) == (299, b"inner")
    assert inner.bodies == [body]  # read and replayed whole, or passed on untouched


def test_lane_answers_equal_the_model_and_the_other_faces(srv):
    texts = ["Rain forms when water vapour condenses.", "A man is eating food."]
    r = post(srv, b'{"model": "%s", "input": ["%s", "%s"]}' % (MODEL.encode(), texts[0].encode(), texts[1].encode()),
             headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.headers.get("x-request-id")
    lane = np.array([d["embedding"] for d in r.json()["data"]])
    other = httpx.post(srv.url + "/api/embed", json={"model": MODEL, "input": texts}, timeout=60).json()
    assert np.allclose(lane, np.array(other["embeddings"]), atol=1e-6)
    assert r.json()["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize("body,status,param", [
    (b'{"model": "no-such-model", "input": "a"}', 404, None),
    (b'{"model": "%s", "input": "a", "encoding_format": "hex"}' % MODEL.encode(), 400, "encoding_format"),
    (b'{"model": "%s", "input": []}' % MODEL.encode(), 400, None),
    (b'{"model": "x", "input": ', 400, None),
])
def test_errors_keep_the_openai_envelope(srv, body, status, param):
    r = post(srv, body, headers={"content-type": "application/json"})
    assert r.status_code == status
    err = r.json()["error"]
    assert err["message"] and err["type"]
    if param:
        assert err["param"] == param


def test_the_body_limit_and_the_metrics_still_apply(srv):
    r = post(srv, b'{"model": "%s", "input": "%s"}' % (MODEL.encode(), b"word " * 2000),
             headers={"content-type": "application/json"})
    assert r.status_code == 413 and "error" in r.json()
    post(srv, b'{"model": "%s", "input": "counted"}' % MODEL.encode(), headers={"content-type": "application/json"})
    metrics = httpx.get(srv.url + "/metrics", timeout=10).text
    lines = [ln for ln in metrics.splitlines() if "inferd_requests_total{" in ln and 'route="/v1/embeddings"' in ln]
    assert any('status="200"' in ln for ln in lines), lines


def test_the_api_key_is_checked_before_the_lane():
    with serve(builtins=True, api_key="sekret") as s:
        body = b'{"model": "%s", "input": "a"}' % MODEL.encode()
        r = post(s, body, headers={"content-type": "application/json"})
        assert r.status_code == 401 and r.json()["error"]["type"]
        ok = post(s, body, headers={"content-type": "application/json", "authorization": "Bearer sekret"})
        assert ok.status_code == 200
