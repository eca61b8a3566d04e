"""Browser security defaults (issue 9): only loopback pages (and our own) may use inferd,
any other Origin is a 403 whatever the content type, Host must be ours (DNS rebinding),
an empty API key is refused at start, and OPTIONS is no way around the key."""

import subprocess
import sys

import httpx
import pytest

from inferd.config import load_settings
from inferd.errors import ConfigError
from tests.server import serve
from tests.test_http_foundation import assert_envelope

EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def srv():
    with serve() as s:
        yield s


def test_foreign_origins_are_refused_whatever_the_content_type(srv):
    for ctype in ("application/x-www-form-urlencoded", "text/plain", "application/json", "multipart/form-data"):
        r = httpx.post(srv.url + "/api/generate", content=b'{"model": "x", "keep_alive": 0}',
                       headers={"origin": EVIL, "content-type": ctype})
        assert_envelope("ollama", r, 403, "Origin 'http://evil.example' is not allowed")
        assert "access-control-allow-origin" not in r.headers
    for origin in (EVIL, "null", "http://localhost.evil.example", "http://127.0.0.1.evil.example:80",
                   "file://", "http://user@localhost"):
        r = httpx.get(srv.url + "/metrics", headers={"origin": origin})
        assert r.status_code == 403, origin
    r = httpx.post(srv.url + "/ai/v1/chunk", json={"input": "a"}, headers={"origin": EVIL})
    assert_envelope("antfly", r, 403)
    assert r.json()["error"] == "FORBIDDEN"
    pre = httpx.options(srv.url + "/v1/chat/completions", headers={"origin": EVIL,
                                                                   "access-control-request-method": "POST"})
    assert pre.status_code == 403 and "access-control-allow-origin" not in pre.headers
    # A cross-site fetch that hides its origin is refused too (GET navigations are not).
    r = httpx.post(srv.url + "/ai/v1/chunk", json={"input": "a"}, headers={"sec-fetch-site": "cross-site"})
    assert r.status_code == 403
    assert httpx.get(srv.url + "/health", headers={"sec-fetch-site": "cross-site"}).status_code == 200


def test_loopback_and_own_origins_get_cors(srv):
    port = srv.url.rsplit(":", 1)[1]
    for origin in ("http://localhost", "http://localhost:3000", "https://127.0.0.1:8443", "http://[::1]:5173",
                   srv.url, f"http://localhost:{port}"):
        r = httpx.get(srv.url + "/v1/models", headers={"origin": origin})
        assert r.status_code == 200, origin
        assert r.headers["access-control-allow-origin"] == origin
        pre = httpx.options(srv.url + "/v1/chat/completions", headers={
            "origin": origin, "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type"})
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == origin


def test_curl_without_origin_keeps_working(srv):
    r = httpx.post(srv.url + "/ai/v1/chunk", content=b'{"input": "hello there"}',
                   headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200 and r.json()["data"][0]["text"] == "hello there"


def test_host_header_must_name_us(srv):
    port = srv.url.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "attacker.localhost.evil", "127.0.0.1.nip.io"):
        r = httpx.get(srv.url + "/v1/models", headers={"host": host})
        assert_envelope("openai", r, 403, "is not allowed")
        assert "DNS rebinding" in r.json()["error"]["message"]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost", f"[::1]:{port}", "app.localhost"):
        assert httpx.get(srv.url + "/v1/models", headers={"host": host}).status_code == 200, host


def test_flags_open_origins_and_hosts():
    with serve(cors_origins="https://app.example,https://tool.example:*", allowed_hosts=["inferd.lan"]) as s:
        for origin in ("https://app.example", "https://tool.example:9999"):
            r = httpx.get(s.url + "/v1/models", headers={"origin": origin})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        assert httpx.get(s.url + "/v1/models", headers={"origin": "https://other.example"}).status_code == 403
        assert httpx.get(s.url + "/v1/models", headers={"host": "inferd.lan:8080"}).status_code == 200
        assert httpx.get(s.url + "/v1/models", headers={"host": "other.lan"}).status_code == 403
    with serve(cors_origins="*", allowed_hosts="*") as s:
        assert httpx.get(s.url + "/v1/models", headers={"origin": EVIL, "host": "x.example"}).status_code == 200


def test_empty_api_key_is_refused_at_start():
    for args, env in ((["--api-key", ""], {}), ([], {"INFERD_API_KEY": ""})):
        p = subprocess.run([sys.executable, "-m", "inferd", "serve", "--no-builtins", "--port", "1", *args],
                           capture_output=True, text=True, timeout=60, env={**__import__("os").environ, **env})
        assert p.returncode == 2, (args, env, p.stderr)
        assert "api_key is empty" in p.stderr
    for key in ("", "  "):
        with pytest.raises(ConfigError, match="api_key is empty"):
            load_settings({"api_key": key})


def test_options_is_no_way_around_the_key():
    with serve(api_key="s3cret") as s:
        r = httpx.options(s.url + "/v1/models")  # no preflight headers: an ordinary request
        assert_envelope("openai", r, 401)
        r = httpx.request("OPTIONS", s.url + "/api/tags", headers={"origin": "http://localhost"})
        assert_envelope("ollama", r, 401)
        pre = httpx.options(s.url + "/v1/models", headers={"origin": "http://localhost",
                                                           "access-control-request-method": "GET"})
        assert pre.status_code == 200  # a real preflight carries no key and needs none
        assert httpx.get(s.url + "/v1/models", headers={"authorization": "Bearer"}).status_code == 401
