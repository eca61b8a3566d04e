"""Image-backed extraction (issue 16): an input's image parts are read by the server's OCR
reader (the built-in pp-ocr), under the readers' media admission, and the entities are
extracted from that text (the built-in spaCy pipeline), as /ai/v1/read + text would give."""

from __future__ import annotations

import httpx
import pytest

from tests.server import serve
from tests.vision_helpers import data_uri, render

LINES = ["Tim Cook visited London on Monday."]
SCHEMA = {"entities": ["PERSON", "GPE", "DATE"]}


@pytest.fixture(scope="module")
def srv():
    with serve(builtins=True, threads=2, models_dir="/nonexistent/models") as s:
        if "pp-ocr" not in s.service.registry.specs or "en_core_web_sm" not in s.service.registry.specs:
            pytest.fail("the built-in pp-ocr reader and en_core_web_sm extractor must be installed")
        yield s


def _extract(srv, content, **kw):
    return httpx.post(srv.url + "/ai/v1/extract", json={"model": "en_core_web_sm", "inputs": [{"content": content}],
                                                         "schema": SCHEMA, **kw}, timeout=120)


@pytest.mark.slow
def test_an_image_input_is_read_then_extracted(srv):
    uri = data_uri(render(LINES))
    read = httpx.post(srv.url + "/ai/v1/read", json={"model": "pp-ocr", "images": [{"url": uri}]}, timeout=120)
    assert read.status_code == 200, read.text
    # Text parts and images keep their order, joined by newlines; offsets index that text.
    joined = "Ann Lee wrote:\n" + read.json()["data"][0]["text"]
    expected = _extract(srv, joined).json()["data"][0]["entities"]
    assert {e["label"] for e in expected} >= {"PERSON", "GPE"}  # the OCR read the line well enough
    r = _extract(srv, [{"type": "text", "text": "Ann Lee wrote:"}, {"type": "image_url", "image_url": {"url": uri}}])
    assert r.status_code == 200, r.text
    ents = r.json()["data"][0]["entities"]
    assert ents == expected and ents[0]["text"] == "Ann Lee"
    assert all(joined[e["start"]:e["end"]] == e["text"] for e in ents)


def test_a_bad_image_fails_its_item_only_with_per_item(srv):
    bad = "data:image/png;base64,AAAA"
    r = _extract(srv, [{"type": "image_url", "image_url": {"url": bad}}])
    assert r.status_code == 400 and r.json()["error"] == "INVALID_REQUEST", r.text
    body = {"model": "en_core_web_sm", "schema": SCHEMA, "error_policy": "per_item",
            "inputs": [{"content": "Tim Cook visited London."}, {"content": [{"type": "image_url",
                                                                            "image_url": {"url": bad}}]}]}
    r = httpx.post(srv.url + "/ai/v1/extract", json=body, timeout=120)
    assert r.status_code == 200
    assert [d["index"] for d in r.json()["data"]] == [0] and r.json()["errors"][0]["index"] == 1
