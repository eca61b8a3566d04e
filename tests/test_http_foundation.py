"""The HTTP skeleton over real HTTP: routes, envelopes per API family, auth, limits, admission."""

import asyncio
import json

import httpx
import pytest

from tests.server import serve

FAMILIES = {  # a POST route of each family that takes a JSON body
    "openai": "/v1/chat/completions",
    "ollama": "/api/show",
    "antfly": "/ai/v1/chunk",
}


def assert_envelope(family, r, status, text=None):
    assert r.status_code == status, r.text
    body = r.json()
    if family == "openai":
        assert set(body["error"]) >= {"message", "type", "code"}
        msg = body["error"]["message"]
    elif family == "ollama":
        assert list(body) == ["error"] and isinstance(body["error"], str)
        msg = body["error"]
    else:
        assert isinstance(body["error"], str) and body["error"].isupper()
        msg = body["message"]
    if text:
        assert text in msg, msg
    return body


@pytest.fixture(scope="module")
def srv():
    with serve(builtins=True) as s:
        yield s


def test_catalog_routes(srv):
    with httpx.Client(base_url=srv.url) as c:
        assert c.get("/health").json() == {"status": "ok"}
        assert c.get("/v1/health").status_code == c.get("/healthz").status_code == 200
        assert c.get("/readyz").json()["status"] == "ready"
        models = c.get("/v1/models").json()
        assert models["object"] == "list" and isinstance(models["data"], list)
        tags = c.get("/api/tags").json()["models"]  # the built-in generator/embedders, whichever are installed
        assert {t["name"].removesuffix(":latest") for t in tags} <= {m["id"] for m in models["data"]}
        assert c.get("/api/ps").json() == {"models": []}
        assert c.get("/api/version").json()["version"]
        ai = c.get("/ai/v1/models").json()
        assert ai["chunkers"]["fixed"]["inputs"] == ["text"]
        for k in ("embedders", "rerankers", "generators", "extractors", "rewriters", "readers", "transcribers",
                  "classifiers"):
            assert k in ai
        assert isinstance(ai["backends"], dict) and ai["allow_downloads"] is False
        assert c.get("/").text == "inferd is running"


def test_unknown_route_and_model_are_404_in_each_envelope(srv):
    with httpx.Client(base_url=srv.url) as c:
        assert_envelope("openai", c.get("/v1/nope"), 404, "no route")
        assert_envelope("ollama", c.get("/api/nope"), 404, "no route")
        assert_envelope("antfly", c.get("/ai/v1/nope"), 404, "no route")
        b = assert_envelope("openai", c.get("/v1/models/ghost"), 404, "'ghost' not found")
        assert b["error"]["type"] == "invalid_request_error" and b["error"]["code"] == "model_not_found"
        assert_envelope("ollama", c.post("/api/show", json={"model": "ghost"}), 404, "'ghost' not found")
        b = assert_envelope("antfly", c.post("/ai/v1/chunk", json={"input": "x", "config": {"model": "ghost"}}), 404)
        assert b["error"] == "MODEL_NOT_FOUND"


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("body", [b"{not json", b'{"model": "a",}', b"[1, 2"])
def test_malformed_json_is_400_in_family_envelope(srv, family, body):
    r = httpx.post(srv.url + FAMILIES[family], content=body, headers={"content-type": "application/json"})
    assert_envelope(family, r, 400, "malformed JSON")


def test_schema_violation_is_400_not_422(srv):
    r = httpx.post(srv.url + "/ai/v1/chunk", json={"input": "x", "config": {"max_chunks": "many"}})
    b = assert_envelope("antfly", r, 400, "config.max_chunks")
    assert b["error"] == "INVALID_REQUEST"
    r = httpx.post(srv.url + "/ai/v1/chunk", json={"config": {}})
    assert_envelope("antfly", r, 400, "'input' is required")


def test_curl_style_form_content_type_is_parsed_as_json(srv):
    r = httpx.post(srv.url + "/ai/v1/chunk", content=b'{"input": "hello there"}',
                   headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200 and r.json()["data"][0]["text"] == "hello there"


def test_request_id_and_cors(srv):
    # Loopback pages are allowed by default (other origins: tests/test_security_browser.py).
    r = httpx.get(srv.url + "/v1/models", headers={"x-request-id": "abc123", "origin": "http://localhost:3000"})
    assert r.headers["x-request-id"] == "abc123"
    assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert len(httpx.get(srv.url + "/health").headers["x-request-id"]) >= 8
    pre = httpx.options(srv.url + "/v1/chat/completions", headers={
        "origin": "http://127.0.0.1:5173", "access-control-request-method": "POST"})
    assert pre.status_code == 200


def test_metrics(srv):
    httpx.get(srv.url + "/v1/models")
    text = httpx.get(srv.url + "/metrics").text
    assert 'inferd_requests_total{method="GET",route="/v1/models",status="200"}' in text
    assert "inferd_requests_in_flight" in text


def test_api_key():
    with serve(api_key="s3cret") as s, httpx.Client(base_url=s.url) as c:
        assert c.get("/health").status_code == 200  # health stays public
        assert c.get("/healthz").status_code == 200
        for fam, path in (("openai", "/v1/models"), ("ollama", "/api/tags"), ("antfly", "/ai/v1/models")):
            r = c.get(path)
            assert_envelope(fam, r, 401)
            assert_envelope(fam, c.get(path, headers={"Authorization": "Bearer wrong"}), 401)
        assert c.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/v1/models").json()["error"]["type"] == "authentication_error"
        assert c.get("/metrics").status_code == 401


def test_body_limit_413_before_parsing():
    with serve(max_body_bytes=2048) as s:
        big = json.dumps({"input": "word " * 2000})
        r = httpx.post(s.url + "/ai/v1/chunk", content=big, headers={"content-type": "application/json"})
        assert_envelope("antfly", r, 413, "exceeds the limit of 2048 bytes")

        def chunks():  # no Content-Length: counted while streaming
            for i in range(0, len(big), 512):
                yield big[i:i + 512].encode()

        r = httpx.post(s.url + "/api/show", content=chunks(), headers={"content-type": "application/json"})
        assert_envelope("ollama", r, 413)
        small = httpx.post(s.url + "/ai/v1/chunk", json={"input": "fits"})
        assert small.status_code == 200


def test_admission_503_with_retry_after():
    with serve(max_concurrent_requests=1, max_queued_requests=0) as s:
        adm = s.service.admission
        release = asyncio.Event()

        async def hold():  # occupy the only slot from inside the server's own loop
            async with adm.slot():
                await release.wait()

        fut = asyncio.run_coroutine_threadsafe(hold(), s.loop)
        _wait(lambda: adm.in_flight == 1)
        r = httpx.post(s.url + "/ai/v1/chunk", json={"input": "some text"})
        b = assert_envelope("antfly", r, 503)
        assert b["error"] == "SERVICE_UNAVAILABLE" and b["reason"] == "inference_capacity"
        assert b["retryable"] is True and b["retry_after_ms"] >= 100
        assert int(r.headers["retry-after"]) >= 1
        r = httpx.get(s.url + "/v1/models")  # catalog routes are not admission-controlled
        assert r.status_code == 200
        s.loop.call_soon_threadsafe(release.set)
        fut.result(5)
        assert httpx.post(s.url + "/ai/v1/chunk", json={"input": "some text"}).status_code == 200


def _wait(cond, timeout=5.0):
    import time
    t = time.time()
    while not cond():
        assert time.time() - t < timeout
        time.sleep(0.01)
