"""The outbound-fetch policy (inferd/net/policy.py) over real HTTP with local servers on
127.0.0.1 (issue 32): a slow-loris image host is cut at --media-fetch-timeout as a bound on
the whole fetch; /api/pull needs --allow-downloads and refuses registry hosts on loopback,
private and link-local addresses unless --allow-private-registries; redirects are checked
hop by hop; /api/create and pulls refuse what is not a GGUF before anything is installed."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time

import httpx
import ollama
import pytest

from inferd.errors import InvalidInput
from inferd.net import policy
from inferd.net.policy import FetchPolicy
from tests.fake_hub import FakeHub
from tests.server import serve
from tests.test_media_admission import PNG
from tests.vision_helpers import read_images, reader_models
from tests.test_pull_hub import TINY, gguf_repo

MT = "application/vnd.ollama.image."


# ---- addresses -----------------------------------------------------------------------------------
@pytest.mark.parametrize("addr", ["127.0.0.1", "127.8.9.1", "10.1.2.3", "172.16.0.1", "192.168.1.1",
                                  "169.254.169.254", "0.0.0.0", "224.0.0.1", "255.255.255.255", "100.64.0.1",
                                  "::1", "::", "fe80::1", "fc00::1", "ff02::1", "::ffff:127.0.0.1",
                                  "::ffff:169.254.169.254", "2002:7f00:1::1", "not-an-ip"])
def test_non_public_addresses_are_refused(addr):
    assert policy.is_public(addr) is False


@pytest.mark.parametrize("addr", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_pass(addr):
    assert policy.is_public(addr) is True


def test_schemes_credentials_and_loopback_names():
    p = FetchPolicy()
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://h/", "http:///nohost", "//h/x"):
        with pytest.raises(InvalidInput, match="only http"):
            p.resolve(url, "u")
    with pytest.raises(InvalidInput, match="credentials"):
        p.resolve("http://user:pw@example.com/", "u")
    with pytest.raises(InvalidInput, match="private or loopback"):
        p.resolve("http://localhost:9/", "u")
    with pytest.raises(InvalidInput, match="private or loopback"):
        p.resolve("http://[::ffff:127.0.0.1]:9/", "u")
    # Allowed by the flag; a trusted origin is allowed without it (and only that origin).
    assert FetchPolicy(allow_private=True).resolve("http://127.0.0.1:9/x", "u").url == "http://127.0.0.1:9/x"
    trusted = FetchPolicy(trusted=frozenset({policy.origin("http://127.0.0.1:9")}))
    assert trusted.resolve("http://127.0.0.1:9/v2/", "u").url == "http://127.0.0.1:9/v2/"
    with pytest.raises(InvalidInput):
        trusted.resolve("http://127.0.0.1:10/v2/", "u")


def test_the_connection_goes_to_the_checked_address():
    """DNS is asked once: the Target's URL holds the checked address, Host and the TLS server
    name the original host, so no second lookup can rebind the name to a private address."""
    t = FetchPolicy().resolve("https://93.184.216.34:8443/a?b=1", "u")   # a literal: no lookup at all
    assert (t.url, t.headers, t.extensions) == ("https://93.184.216.34:8443/a?b=1", {"Host": "93.184.216.34:8443"},
                                                {"sni_hostname": "93.184.216.34"})
    p = FetchPolicy()
    infos = [(2, 1, 6, "", ("93.184.216.34", 443))]
    t = p._decide("https://img.example.com/x.png", policy.urlsplit("https://img.example.com/x.png"), infos, "u")
    assert t.url == "https://93.184.216.34/x.png" and t.headers == {"Host": "img.example.com"}
    assert t.extensions == {"sni_hostname": "img.example.com"}
    # One private answer among public ones is enough to refuse.
    with pytest.raises(InvalidInput, match="private or loopback"):
        p._decide("https://img.example.com/", policy.urlsplit("https://img.example.com/"),
                  infos + [(2, 1, 6, "", ("10.0.0.7", 443))], "u")


# ---- 3. a whole-fetch deadline ---------------------------------------------------------------------
class _Slow(http.server.BaseHTTPRequestHandler):
    """Sends a PNG's headers at once, then its body one byte a second (a slow loris)."""

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(PNG)))
        self.end_headers()
        try:
            for b in PNG:
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                time.sleep(1.0)
        except OSError:
            pass  # the server under test hung up: what it should do


@pytest.fixture
def slow_host():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_media_fetch_timeout_bounds_the_whole_fetch(tmp_path, slow_host):
    with serve(models_dir=str(reader_models(tmp_path)), allow_remote_media=True, allow_private_media_urls=True,
               media_fetch_timeout=2) as s:
        t0 = time.monotonic()
        try:
            r = httpx.post(s.url + "/ai/v1/read", json={"model": "trocr-tiny", "max_tokens": 2,
                                                          "images": [{"url": slow_host + "/a.png"}]}, timeout=15)
        except httpx.ReadTimeout:  # pragma: no cover - the defect: each read is bounded, not the fetch
            pytest.fail("the fetch was not cut at --media-fetch-timeout")
        took = time.monotonic() - t0
        assert r.status_code == 400 and "--media-fetch-timeout" in r.json()["message"], r.text
        assert 1.5 < took < 6


# ---- redirects, hop by hop ---------------------------------------------------------------------------
class _Hop(http.server.BaseHTTPRequestHandler):
    target = ""
    hits: list[str] = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        type(self).hits.append(self.path)
        if self.path.startswith("/go"):
            self.send_response(302)
            self.send_header("Location", type(self).target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(PNG)))
        self.end_headers()
        self.wfile.write(PNG)


def test_every_redirect_is_checked_again():
    """A trusted origin (the operator's registry) redirecting to another loopback port: the
    second hop is refused, and never contacted."""
    a = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hop)
    b = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hop)
    for srv in (a, b):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        ua, ub = (f"http://127.0.0.1:{x.server_address[1]}" for x in (a, b))
        _Hop.hits = []
        _Hop.target = ub + "/img.png"
        p = FetchPolicy(trusted=frozenset({policy.origin(ua)}))
        with httpx.Client() as c:
            with pytest.raises(InvalidInput, match="private or loopback"):
                policy.get(p, c, ua + "/go", 1 << 20, deadline=5, where="model")
            assert _Hop.hits == ["/go"]                        # b was never reached
            status, body = policy.get(FetchPolicy(allow_private=True), c, ua + "/go", 1 << 20, deadline=5,
                                      where="model")
            assert (status, body) == (200, PNG)
            _Hop.target = ua + "/go"                            # a loop
            with pytest.raises(InvalidInput, match="more than 3 redirects"):
                policy.get(FetchPolicy(allow_private=True), c, ua + "/go", 1 << 20, deadline=5, where="model")
    finally:
        for srv in (a, b):
            srv.shutdown()
            srv.server_close()


def test_media_redirect_to_loopback_is_refused(tmp_path):
    """An image URL is checked, then every hop of it: here the first hop is loopback too, so
    the fetch is refused before any connection."""
    a = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hop)
    threading.Thread(target=a.serve_forever, daemon=True).start()
    try:
        _Hop.hits = []
        with serve(models_dir=str(reader_models(tmp_path)), allow_remote_media=True) as s:
            r = read_images(s, f"http://127.0.0.1:{a.server_address[1]}/go")
            assert r.status_code == 400 and "private or loopback" in r.json()["message"]
        assert _Hop.hits == []
    finally:
        a.shutdown()
        a.server_close()


# ---- 4. /api/pull: --allow-downloads and the address rules -------------------------------------------
@pytest.fixture(scope="module")
def registry():
    fake = FakeHub()
    gguf_repo(fake)
    fake.add_ollama("tiny", "1m", [(MT + "model", TINY), (MT + "license", b"MIT")])
    fake.add_ollama("junk", "1m", [(MT + "model", b"this is not a GGUF file at all" * 10)])
    yield fake
    fake.close()


def _pull(s, name, stream=False):
    return httpx.post(s.url + "/api/pull", json={"model": name, "insecure": True, "stream": stream}, timeout=60)


def test_pull_needs_allow_downloads(registry, tmp_path):
    port = registry.url.rsplit(":", 1)[1]
    n = len(registry.log)
    with serve(models_dir=str(tmp_path)) as s:
        for stream in (False, True):
            r = _pull(s, f"127.0.0.1:{port}/library/tiny:1m", stream)
            assert r.status_code == 403 and "--allow-downloads" in r.json()["error"], r.text
        r = _pull(s, "tiny:1m")
        assert r.status_code == 403
        # /models/load of a model that is not here is a 404 (no download) without the flag.
        r = httpx.post(s.url + "/models/load", json={"model": "hf.co/acme/tiny-GGUF:Q8_0"}, timeout=30)
        assert r.status_code == 404
    assert len(registry.log) == n                             # nothing was fetched


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "169.254.169.254", "10.0.0.1",
                                  "[::1]:{port}"])
def test_pull_refuses_private_registry_hosts(registry, tmp_path, host):
    port = registry.url.rsplit(":", 1)[1]
    name = f"{host.format(port=port)}/library/tiny:1m"
    n = len(registry.log)
    with serve(models_dir=str(tmp_path), allow_downloads=True, download_reserve_bytes=0) as s:
        for stream in (False, True):
            r = _pull(s, name, stream)
            if "[" in host:                                   # not an Ollama name at all
                assert r.status_code == 400
                continue
            assert r.status_code == 400 and "--allow-private-registries" in r.json()["error"], r.text
    assert len(registry.log) == n
    assert not (tmp_path / "generators").exists()


def test_private_registry_host_with_the_flag(registry, tmp_path):
    port = registry.url.rsplit(":", 1)[1]
    with serve(models_dir=str(tmp_path), allow_downloads=True, allow_private_registries=True,
               download_reserve_bytes=0, threads=1) as s:
        c = ollama.Client(host=s.url)
        done = list(c.pull(f"127.0.0.1:{port}/library/tiny:1m", insecure=True, stream=True))
        assert done[-1].status == "success"
        r = c.generate(f"127.0.0.1:{port}/library/tiny:1m", prompt="hi", options={"num_predict": 2})
        assert r.eval_count == 2
        # 5. a registry layer that is not a GGUF: refused before install, nothing served.
        r = _pull(s, f"127.0.0.1:{port}/library/junk:1m")
        assert r.status_code == 502 and "not a GGUF" in r.json()["error"], r.text
        assert not (tmp_path / "generators" / f"127.0.0.1_{port}" / "library" / "junk").exists()
        assert httpx.post(s.url + "/api/show", json={"model": f"127.0.0.1:{port}/library/junk:1m"}).status_code == 404


def test_default_registry_is_trusted_but_its_redirects_are_not(registry, tmp_path):
    """The configured --ollama-registry may be a local mirror (loopback): the operator chose it."""
    with serve(models_dir=str(tmp_path), allow_downloads=True, ollama_registry=registry.url,
               download_reserve_bytes=0) as s:
        r = _pull(s, "tiny:1m")
        assert r.status_code == 200 and r.json()["status"] == "success", r.text


# ---- 5. /api/create checks what it installs -----------------------------------------------------------
def _blob(s, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert httpx.post(f"{s.url}/api/blobs/{digest}", content=data).status_code == 201
    return digest


def _gguf_header(version=3, tensors=1, kv=0, extra=b"") -> bytes:
    return b"GGUF" + version.to_bytes(4, "little") + tensors.to_bytes(8, "little") + kv.to_bytes(8, "little") + extra


@pytest.fixture(scope="module")
def creator(tmp_path_factory):
    with serve(models_dir=str(tmp_path_factory.mktemp("models")), threads=1) as s:
        yield s


@pytest.mark.parametrize("data,why", [
    (b"not a gguf, just some bytes" * 100, "no GGUF magic"),
    (TINY[:64], "truncated"),
    (_gguf_header(version=99) + b"\0" * 64, "version 99"),
    (_gguf_header(tensors=0) + b"\0" * 64, "tensor count"),
    (_gguf_header(tensors=1 << 40) + b"\0" * 64, "tensor count"),
    (_gguf_header(kv=1 << 40) + b"\0" * 64, "key count"),
    (_gguf_header(kv=0) + b"\0" * 64, "general.architecture"),
], ids=["text", "truncated", "version", "no-tensors", "too-many-tensors", "too-many-keys", "no-architecture"])
def test_create_refuses_a_blob_that_is_not_a_usable_gguf(creator, data, why):
    s = creator
    digest = _blob(s, data)
    r = httpx.post(s.url + "/api/create", json={"model": "bad", "files": {"model.gguf": digest}, "stream": False})
    assert r.status_code == 400 and why in r.json()["error"], r.text      # was 200, then a 500 at the first chat
    assert httpx.post(s.url + "/api/show", json={"model": "bad"}).status_code == 404
    # Streamed, the refusal is the error line; still nothing is created.
    r = httpx.post(s.url + "/api/create", json={"model": "bad", "files": {"model.gguf": digest}})
    assert why in [json.loads(x) for x in r.text.splitlines()][-1]["error"]
    assert httpx.post(s.url + "/api/show", json={"model": "bad"}).status_code == 404


def test_create_from_a_real_gguf_still_chats(creator):
    s = creator
    r = httpx.post(s.url + "/api/create", json={"model": "good", "files": {"model.gguf": _blob(s, TINY)},
                                                "stream": False})
    assert r.status_code == 200, r.text
    r = httpx.post(s.url + "/api/generate", json={"model": "good", "prompt": "hi", "stream": False,
                                                 "options": {"num_predict": 2}}, timeout=60)
    assert r.status_code == 200 and r.json()["eval_count"] == 2
