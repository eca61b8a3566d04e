"""The Antfly spec's /ai/v1/read limits and admission order, its config-file names, and
bodies big enough for the media budget (issue 27), over real HTTP on the tiny TrOCR fixture."""

from __future__ import annotations

import asyncio
import http.client
import threading
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.config import load_settings
from inferd.errors import ConfigError
from inferd.scheduling.media import MediaLimits
from tests.server import serve
from tests.vision_helpers import data_uri, encode, read_images, reader_models

MiB = 1 << 20
PNG = encode(Image.new("RGB", (40, 30), (200, 10, 10)))




def test_read_budget_follows_the_spec_formula():
    s = load_settings({"models_dir": "/x", "builtins": False})
    lim = MediaLimits.from_settings(s)
    assert lim.read_budget(1) == 100 * MiB and lim.read_budget(2) == 200 * MiB
    assert lim.read_budget(3) == 256 * MiB == lim.read_budget(64)  # the read-batch limit
    two = MediaLimits.from_settings(load_settings({"models_dir": "/x", "max_concurrent_requests": 2}))
    assert two.read_budget(8) == 32 * MiB  # 16 MiB x a positive max_concurrent_requests
    zero = MediaLimits.from_settings(load_settings({"models_dir": "/x", "max_concurrent_requests": 0}))
    assert zero.read_budget(64) == 256 * MiB and zero.pixel_bytes == 512 * MiB  # 0: unbounded, 512 MiB stays
    small = MediaLimits.from_settings(load_settings({"models_dir": "/x", "max_read_batch_bytes": "1MiB"}))
    assert small.read_budget(4) == 1 * MiB


def test_read_is_admitted_before_the_model_is_resolved(tmp_path):
    with serve(models_dir=str(reader_models(tmp_path)), max_concurrent_requests=1, max_queued_requests=0) as s:
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
            r = read_images(s, data_uri(PNG), model="no-such-reader")
            assert r.status_code == 503 and r.json()["reason"] == "inference_capacity", r.text
        finally:
            release.set()
            fut.result(5)
        r = read_images(s, data_uri(PNG), model="no-such-reader")  # with capacity: the unknown name
        assert r.status_code == 404 and r.json()["error"] == "MODEL_NOT_FOUND"


def test_read_per_image_and_batch_limits(tmp_path):
    noise = encode(Image.fromarray(np.random.default_rng(0).integers(0, 255, (60, 60, 3), dtype=np.uint8)))
    per = len(noise) + 16
    with serve(models_dir=str(reader_models(tmp_path)), max_media_bytes=per, max_read_batch_bytes=3 * per) as s:
        assert read_images(s, data_uri(noise), data_uri(noise), data_uri(noise)).status_code == 200  # each under per
        r = read_images(s, data_uri(noise + b"\0" * 17))
        assert r.status_code == 413 and "per-image limit" in r.json()["message"]
        r = read_images(s, *[data_uri(noise)] * 4)  # 4 x per > the batch limit
        assert r.status_code == 413 and "media budget" in r.json()["message"]
        assert s.service.registry.loaded.keys() <= {"trocr-tiny"}


def test_body_limit_is_no_smaller_than_the_media_budget(tmp_path):
    noise = encode(Image.fromarray(np.random.default_rng(1).integers(0, 255, (160, 160, 3), dtype=np.uint8)))
    assert len(noise) > 64 * 1024
    with serve(models_dir=str(reader_models(tmp_path)), max_body_bytes="64KiB", max_concurrent_requests=4) as s:
        assert read_images(s, data_uri(noise)).status_code == 200  # the body is over 64 KiB; the image is in budget
        r = httpx.post(s.url + "/ai/v1/chunk", json={"input": "word " * 20_000})
        assert r.status_code == 413  # routes without images keep --max-body-bytes
        # a body over the read budget (16 MiB x 4 = 64 MiB, as base64, plus margin) is still refused unread
        host, port = s.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.putrequest("POST", "/ai/v1/read")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(100 * MiB))
        conn.endheaders()  # no body sent: the limit is decided on the header
        assert conn.getresponse().status == 413
        conn.close()


def test_config_file_takes_the_spec_names(tmp_path):
    cfg = tmp_path / "inferd.toml"
    cfg.write_text("max_download_size_bytes = 1048576\n[admission.inference]\nmax_concurrent_requests = 0\n")
    s = load_settings({"models_dir": "/x"}, cfg)
    assert s.max_media_bytes == 1 << 20 and s.max_concurrent_requests == 0
    json_cfg = tmp_path / "inferd.json"
    json_cfg.write_text('{"admission": {"inference": {"max_concurrent_requests": 3}}, "max_download_size_bytes": 0}')
    s = load_settings({"models_dir": "/x"}, json_cfg)
    assert s.max_concurrent_requests == 3 and s.max_media_bytes == 0
    for bad, words in [('[admission]\nqueue = 1\n', "admission"),
                       ('max_media_bytes = 5\nmax_download_size_bytes = 6\n', "disagree")]:
        cfg.write_text(bad)
        with pytest.raises(ConfigError, match=words):
            load_settings({"models_dir": "/x"}, cfg)


def test_zero_concurrency_is_unbounded(tmp_path):
    with serve(models_dir=str(reader_models(tmp_path)), max_concurrent_requests=0) as s:
        assert s.service.admission.max_in_flight >= 10**6
        assert read_images(s, data_uri(PNG)).status_code == 200
    with serve(models_dir=str(reader_models(tmp_path / "b")), max_media_bytes=0) as s:
        r = read_images(s, data_uri(PNG))  # a zero download limit disables nonempty media
        assert r.status_code == 413
