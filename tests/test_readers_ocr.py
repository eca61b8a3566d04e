"""The built-in PP-OCR reader (`pp-ocr`, PP-OCRv6 small from the rapidocr wheel) over real
HTTP: rendered invoice lines read back exactly with a box around each line, also rotated and
in low contrast; data URIs and uploaded file ids; concurrent requests share batches."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.types import ReadItem

from tests.server import serve
from tests.vision_helpers import INVOICE, data_uri, encode, render, store_file


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    with serve(builtins=True, threads=2, data_dir=str(data), models_dir="/nonexistent/models") as s:
        if "pp-ocr" not in s.service.registry.specs:
            pytest.fail("rapidocr is not installed (pip install -e '.[models]')")
        yield s


def _read(srv, *urls, **kw):
    r = httpx.post(srv.url + "/ai/v1/read", json={"model": "pp-ocr", "images": [{"url": u} for u in urls], **kw},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_listed_as_reader(srv):
    m = httpx.get(srv.url + "/ai/v1/models").json()
    assert m["readers"]["pp-ocr"]["inputs"] == ["image"]
    assert "regions" in m["readers"]["pp-ocr"]["capabilities"]


def test_reads_invoice_lines_exactly_with_boxes(srv):
    img = render(INVOICE)
    upright = img
    rotated = img.rotate(6, expand=True, fillcolor=(255, 255, 255), resample=Image.BICUBIC)
    faint = render(INVOICE, fg=(110, 110, 110), bg=(160, 160, 160))
    body = _read(srv, data_uri(upright), data_uri(rotated, "JPEG"), data_uri(faint, "WEBP"))
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    for d in body["data"]:
        assert d["object"] == "read"
        assert d["text"] == "\n".join(INVOICE)
        assert [g["text"] for g in d["regions"]] == INVOICE
        assert all(g["confidence"] > 0.8 for g in d["regions"])
    # boxes: inside the image, one per line, top to bottom, each as tall as a line of text
    w, h = upright.size
    boxes = [g["bbox"] for g in body["data"][0]["regions"]]
    for (x1, y1, x2, y2), nxt in zip(boxes, boxes[1:] + [None]):
        assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h
        assert 20 <= y2 - y1 <= 70
        if nxt:
            assert y2 <= nxt[1] + 8
    assert boxes[0][0] < 30 and boxes[1][2] > boxes[0][2]  # the 2nd line is the longest


def test_reads_uploaded_file_by_id(srv):
    store_file(srv.settings.data_dir, "file-ocr0001", encode(render(INVOICE[:2])))
    body = _read(srv, "file-ocr0001")
    assert body["data"][0]["text"] == "\n".join(INVOICE[:2])


def test_concurrent_requests_share_batches(srv):
    # (a one-line image with a thin margin splits "Invoice 2024-117" in two, in the package too)
    urls = [data_uri(render([line], pad=30)) for line in INVOICE]

    def one(u):
        return _read(srv, u)["data"][0]["text"]

    with cf.ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(one, urls))
    assert texts == INVOICE

    # Images of three requests waiting together are read as ONE batch (one recognition round).
    batcher = srv.service.registry.loaded["pp-ocr"].model.scheduler
    items = [ReadItem(np.asarray(render([line], pad=30))) for line in INVOICE[1:]]

    async def three_requests():
        before = batcher.stats.batches
        outs = await asyncio.gather(*(batcher.submit([it], [1]) for it in items))
        return batcher.stats.batches - before, [o[0].text for o in outs]

    n_batches, got = srv.call(three_requests(), timeout=120)
    assert n_batches == 1 and got == INVOICE[1:]


def test_prompt_is_refused_by_ocr(srv):
    r = httpx.post(srv.url + "/ai/v1/read", json={"model": "pp-ocr", "prompt": "<s_cord-v2>",
                                                  "images": [{"url": data_uri(render(["x"]))}]}, timeout=60)
    assert r.status_code == 400 and "takes no prompt" in r.json()["message"]


def test_blank_image_reads_no_text(srv):
    body = _read(srv, data_uri(Image.new("RGB", (200, 80), "white")))
    assert body["data"][0]["text"] == "" and body["data"][0]["regions"] == []


def test_unreadable_shape_is_400_not_500(srv):
    r = httpx.post(srv.url + "/ai/v1/read", json={"model": "pp-ocr",
                                                  "images": [{"url": data_uri(Image.new("RGB", (3000, 1), "white"))}]},
                   timeout=60)
    assert r.status_code == 400 and "too thin" in r.json()["message"]


def test_ppocr_folder_in_models_dir(tmp_path):
    """Any PP-OCR det/rec(/cls) ONNX set in readers/<name>/ is a reader (here: the same
    PP-OCRv6 files, linked), served instead of the built-in."""
    from inferd.runtimes.ocr.ppocr import package_models

    d = tmp_path / "readers" / "my-ocr"
    d.mkdir(parents=True)
    for part, src in package_models().items():
        (d / f"ppocr_{part}.onnx").symlink_to(src)
    with serve(builtins=True, models_dir=str(tmp_path), threads=2) as s:
        readers = httpx.get(s.url + "/ai/v1/models").json()["readers"]
        assert set(readers) == {"my-ocr"}  # a configured reader replaces the built-in
        body = httpx.post(s.url + "/ai/v1/read", json={"images": [{"url": data_uri(render(INVOICE[2:]))}]},
                          timeout=120).json()  # the only reader: model may be omitted
        assert body["model"] == "my-ocr" and body["data"][0]["text"] == "\n".join(INVOICE[2:])
