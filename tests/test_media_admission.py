"""Media admission (scheduling/media.py, media/): byte, header, dimension and pixel budgets
with their statuses (400 malformed, 413 too large, 503 over capacity without fetching),
uploaded file ids, and remote URLs (off by default; loopback refused; redirects bounded).
Served by the tiny TrOCR fixture, so a request that passes admission is cheap."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.errors import InvalidInput, NotFound, Overloaded
from inferd.media.sources import MediaRef, parse_ref
from inferd.scheduling.media import MediaAdmission, MediaLimits
from tests.server import serve
from tests.vision_helpers import data_uri, encode, read_images, reader_models, store_file

MiB = 1 << 20
PNG = encode(Image.new("RGB", (40, 30), (200, 10, 10)))




# ---- limits ----------------------------------------------------------------------------------------
class _S:
    def __init__(self, **kw):
        self.max_concurrent_requests, self.max_media_bytes, self.max_image_dimension = 64, 100 * MiB, 16384
        self.allow_remote_media = self.allow_private_media_urls = False
        self.media_fetch_timeout, self.data_dir, self.queue_timeout = 10.0, "/tmp", 60.0
        self.__dict__.update(kw)


def test_limits_follow_the_spec_formula():
    assert MediaLimits.from_settings(_S()).request_bytes == 100 * MiB
    assert MediaLimits.from_settings(_S()).pixel_bytes == 512 * MiB
    assert MediaLimits.from_settings(_S(max_concurrent_requests=2)).request_bytes == 32 * MiB
    assert MediaLimits.from_settings(_S(max_concurrent_requests=2)).pixel_bytes == 32 * MiB
    assert MediaLimits.from_settings(_S(max_media_bytes=5 * MiB)).request_bytes == 5 * MiB
    assert MediaLimits.from_settings(_S(max_media_bytes=500 * MiB)).request_bytes == 100 * MiB


def test_parse_ref_kinds_and_bad_schemes():
    assert parse_ref("data:image/png;base64,AAAA", "x").kind == "data"
    assert parse_ref("file-abc123", "x").kind == "file"
    assert parse_ref("https://example.com/a.png", "x").kind == "http"
    for bad in ("ftp://h/a.png", "/etc/passwd", "data:image/png,notbase64", ""):
        with pytest.raises(InvalidInput):
            parse_ref(bad, "images[0].url")


def test_pixel_budget_is_reserved_across_requests():
    """Two requests that each fit but not together: the second waits for the first, and one
    that cannot wait long enough gets a retryable 503."""
    img = encode(Image.new("RGB", (100, 100)))
    lim = MediaLimits(request_bytes=MiB, pixel_bytes=100 * 100 * 16 + 10, max_dimension=0, wait_timeout=0.3)
    adm = MediaAdmission(lim)
    ref = parse_ref(data_uri(img), "images[0].url")
    order = []

    async def first():
        async with adm.admit([ref]) as g:
            order.append("a in")
            assert g.pixel_bytes == 160_000
            await asyncio.sleep(0.1)
            order.append("a out")

    async def second():
        await asyncio.sleep(0.01)
        async with adm.admit([ref]):
            order.append("b in")

    async def main():
        await asyncio.gather(first(), second())
        assert order == ["a in", "a out", "b in"] and adm.held == 0
        async with adm.admit([ref]):
            with pytest.raises(Overloaded):
                async with adm.admit([ref]):
                    pass
        assert adm.held == 0

    asyncio.run(main())


def test_file_ids_never_name_paths(tmp_path):
    store_file(tmp_path, "file-good1", PNG)
    adm = MediaAdmission(MediaLimits(request_bytes=MiB, pixel_bytes=MiB * 16, max_dimension=0, data_dir=tmp_path))

    async def admit(fid):
        async with adm.admit([MediaRef("file", "images[0].url", fid)]) as g:
            return g.items[0].header

    assert asyncio.run(admit("file-good1")).width == 40
    (tmp_path / "secret").write_bytes(PNG)
    for bad in ("file-../secret", "file-good1/../../secret", "file-missing", "file-", "file-a.b"):
        with pytest.raises(NotFound):
            asyncio.run(admit(bad))


# ---- over HTTP -------------------------------------------------------------------------------------
def test_malformed_images_are_400(tmp_path):
    truncated = encode(Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)))[:400]
    with serve(models_dir=str(reader_models(tmp_path))) as s:
        for url, needle in (("data:image/png;base64,%%%%", "base64"),
                            (data_uri(b"GIF89a this is not really a gif"), "not a readable image"),
                            (data_uri(b"hello world"), "not a readable image"),
                            (data_uri(truncated), "truncated or corrupt")):
            r = read_images(s, url)
            assert r.status_code == 400, (url[:40], r.text)
            assert r.json()["error"] == "INVALID_REQUEST" and needle in r.json()["message"]
        r = read_images(s, "ftp://example.com/x.png")
        assert r.status_code == 400 and "scheme" in r.json()["message"]
        assert read_images(s, "file-../../etc/passwd").status_code == 404
        assert read_images(s, "file-nosuchfile").status_code == 404
        assert read_images(s, data_uri(PNG), model="nope").status_code == 404
        assert s.service.registry.loaded == {}  # nothing above loaded the model
        assert read_images(s, data_uri(PNG), data_uri(encode(Image.new("L", (9, 9)), "BMP"), "BMP"),
                     data_uri(encode(Image.new("RGB", (20, 20)), "GIF"), "GIF")).status_code == 200


def test_dimension_pixel_and_byte_excess_are_413_before_loading(tmp_path):
    with serve(models_dir=str(reader_models(tmp_path)), max_image_dimension=256, max_concurrent_requests=1) as s:
        r = read_images(s, data_uri(Image.new("RGB", (300, 20))))
        assert r.status_code == 413 and r.json()["error"] == "PAYLOAD_TOO_LARGE" and "256" in r.json()["message"]
        # 16 MiB x 1 slot = 1,048,576 pixels: two 250x... images fit the edge limit but not together
        big = data_uri(Image.new("RGB", (256, 256)))
        r = read_images(s, *[big] * 17)
        assert r.status_code == 413 and "decoded-pixel budget" in r.json()["message"]
        assert s.service.registry.loaded == {} and s.service.media.held == 0
        assert read_images(s, *[big] * 2).status_code == 200
        assert s.service.media.held == 0
        metrics = httpx.get(s.url + "/metrics").text
        assert f"inferd_media_pixel_budget_bytes {16 * MiB}" in metrics and "inferd_media_pixel_bytes_reserved 0" in metrics
    with serve(models_dir=str(reader_models(tmp_path / "b")), max_media_bytes=len(PNG) + 10) as s:
        assert read_images(s, data_uri(PNG)).status_code == 200
        # /read: the limit is per image (x the image count), so two images each under it fit
        assert read_images(s, data_uri(PNG), data_uri(PNG)).status_code == 200
        r = read_images(s, data_uri(PNG + b"\0" * 11))
        assert r.status_code == 413 and "per-image limit" in r.json()["message"]
    with serve(models_dir=str(reader_models(tmp_path / "c")), max_media_bytes=0) as s:
        assert read_images(s, data_uri(PNG)).status_code == 413


def test_uploaded_file_ids(tmp_path):
    store_file(tmp_path / "data", "file-img42", PNG)
    with serve(models_dir=str(reader_models(tmp_path)), data_dir=str(tmp_path / "data")) as s:
        assert read_images(s, "file-img42").status_code == 200


class _Images(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self):  # noqa: N802
        type(self).hits += 1
        if self.path.startswith("/r/"):
            n = int(self.path[3:])
            self.send_response(302)
            self.send_header("Location", f"/r/{n - 1}" if n > 1 else "/img.png")
            self.end_headers()
            return
        if self.path == "/img.png":
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)
            return
        self.send_response(404)
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.fixture
def image_host():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    _Images.hits = 0
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_remote_urls(tmp_path, image_host):
    url = image_host + "/img.png"
    with serve(models_dir=str(reader_models(tmp_path))) as s:  # default: data stays on the host
        r = read_images(s, url)
        assert r.status_code == 400 and "--allow-remote-media" in r.json()["message"] and _Images.hits == 0
    with serve(models_dir=str(reader_models(tmp_path / "b")), allow_remote_media=True) as s:
        r = read_images(s, url)
        assert r.status_code == 400 and "private or loopback" in r.json()["message"] and _Images.hits == 0
    with serve(models_dir=str(reader_models(tmp_path / "c")), allow_remote_media=True, allow_private_media_urls=True,
               max_media_bytes=len(PNG) + 100) as s:
        assert read_images(s, url).status_code == 200
        assert read_images(s, image_host + "/r/3").status_code == 200
        r = read_images(s, image_host + "/r/4")
        assert r.status_code == 400 and "redirects" in r.json()["message"]
        assert read_images(s, image_host + "/missing.png").status_code == 400
        # /read's budget is the per-image limit x the image count (spec 003): two fit
        assert read_images(s, url, url).status_code == 200


def test_capacity_is_checked_before_any_fetch(tmp_path, image_host):
    with serve(models_dir=str(reader_models(tmp_path)), allow_remote_media=True, allow_private_media_urls=True,
               max_concurrent_requests=1, max_queued_requests=0) as s:
        release = threading.Event()

        async def hold():
            async with s.service.admission.slot():
                while not release.is_set():
                    await asyncio.sleep(0.01)

        fut = asyncio.run_coroutine_threadsafe(hold(), s.loop)
        deadline = time.time() + 5
        while s.service.admission.in_flight == 0 and time.time() < deadline:
            time.sleep(0.01)
        try:
            r = read_images(s, image_host + "/img.png")
            assert r.status_code == 503 and r.json()["reason"] == "inference_capacity" and "retry-after" in r.headers
            assert _Images.hits == 0
        finally:
            release.set()
            fut.result(5)
        assert read_images(s, image_host + "/img.png").status_code == 200 and _Images.hits == 1


def test_decoding_formats_exif_gif_and_alpha():
    from inferd.media.images import decode, probe

    # EXIF orientation 6 (the camera was turned): a 40x20 JPEG shows as 20x40
    img = Image.new("RGB", (40, 20), (255, 0, 0))
    img.paste((0, 0, 255), (0, 0, 10, 20))  # blue strip on the left edge
    exif = Image.Exif()
    exif[0x0112] = 6
    jpeg = encode(img, "JPEG", exif=exif.tobytes(), quality=95)
    assert probe(jpeg, "x").width == 40  # the header, as stored
    rgb = decode(jpeg, "x")
    assert rgb.shape == (40, 20, 3)
    assert rgb[2, 10, 2] > 200 and rgb[-3, 10, 0] > 200  # rotated 90 clockwise: blue strip on top
    # GIF: the first frame only
    frames = [Image.new("P", (8, 8), 1), Image.new("P", (8, 8), 2)]
    for f in frames:
        f.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0] + [0] * 759)
    buf = __import__("io").BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    assert tuple(decode(buf.getvalue(), "x")[0, 0]) == (255, 0, 0)
    # transparency is flattened onto white; grey and palette images come out RGB
    rgba = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    assert tuple(decode(encode(rgba), "x")[0, 0]) == (255, 255, 255)
    assert decode(encode(Image.new("L", (5, 3), 128), "BMP"), "x").shape == (3, 5, 3)
    assert decode(encode(Image.new("RGB", (6, 6), (9, 9, 9)), "WEBP", lossless=True), "x")[0, 0].tolist() == [9, 9, 9]
    with pytest.raises(InvalidInput):
        probe(encode(Image.new("RGB", (4, 4)), "TIFF"), "x")  # not one of the accepted formats


def test_remote_fetch_connects_to_the_checked_address(tmp_path, image_host, monkeypatch):
    """Without --allow-private-media-urls the fetch goes to the address that was checked, with
    the original Host header (no second DNS lookup to rebind). Loopback counts as public here
    only so that the test can reach its own image host."""
    from inferd.net import policy

    t = policy.pin("https://img.example.com:8443/a.png?x=1", "93.184.216.34")
    assert t.url == "https://93.184.216.34:8443/a.png?x=1"
    assert t.headers == {"Host": "img.example.com:8443"} and t.extensions == {"sni_hostname": "img.example.com"}
    assert policy.pin("http://h/a", "2001:db8::1").url == "http://[2001:db8::1]/a"
    monkeypatch.setattr(policy, "is_public", lambda addr: True)
    host = image_host
    with serve(models_dir=str(reader_models(tmp_path)), allow_remote_media=True) as s:
        assert read_images(s, host + "/img.png").status_code == 200
        assert read_images(s, host + "/r/2").status_code == 200
    assert _Images.hits == 4


def test_capacity_weight_of_image_requests():
    adm = MediaAdmission(MediaLimits(request_bytes=100 * MiB, pixel_bytes=512 * MiB, max_dimension=0))
    small = parse_ref(data_uri(PNG), "x")
    assert adm.weight([small]) == 1 and adm.weight([small] * 5) == 1
    assert adm.weight([small] * 5, per_two_images=True) == 3  # /read: one unit per two images
    remote = MediaRef("http", "x", "https://example.com/a.png")
    assert adm.weight([remote]) == 7  # may read the whole 100 MiB budget: ceil(100 / 16)
    big = MediaRef("data", "x", "A" * (40 * MiB))  # 30 MiB decoded
    assert adm.weight([big]) == 2
