"""/ai/v1/extract request handling: errors in the Antfly envelope, error_policy, limits,
model choice, /ai/v1/models entries, and shared forward passes."""

from __future__ import annotations

import concurrent.futures as cf

import httpx
import pytest

from tests.extract_fixtures import extract_srv, post, reference  # noqa: F401

REF = reference("tiny-gliner")
GL = {"model": "tiny-gliner", "schema": {"entities": REF["labels"]}}


def body(**kw):
    return {**GL, "inputs": [{"content": REF["texts"][0]}], **kw}


@pytest.mark.parametrize("patch,status,code,needle", [
    ({"model": "nope"}, 404, "MODEL_NOT_FOUND", "nope"),
    ({"model": "tiny", "schema": {"entities": ["x"]}}, 400, "MODEL_NOT_SUPPORTED", "entities"),
    ({"model": "tiny-topic", "schema": {"structures": {"s": {"fields": {"a": "string"}}}}}, 400,
     "MODEL_NOT_SUPPORTED", "structures"),
    ({"model": "tiny-gliner", "schema": {"classifications": [{"name": "c", "labels": ["a"]}]}}, 400,
     "MODEL_NOT_SUPPORTED", "classifications"),
    ({"schema": {}}, 400, "INVALID_REQUEST", "schema"),
    ({"schema": {"relations": [{"type": "r"}]}}, 400, "INVALID_REQUEST", "entities"),
    ({"schema": {"entities": [""]}}, 400, "INVALID_REQUEST", "schema.entities[0]"),
    ({"schema": {"entities": ["a"], "colours": ["red"]}}, 400, "INVALID_REQUEST", "colours"),
    ({"options": {"threshold": 1.5}}, 400, "INVALID_REQUEST", "threshold"),
    ({"options": {"flat": True}}, 400, "INVALID_REQUEST", "flat"),
    ({"error_policy": "skip"}, 400, "INVALID_REQUEST", "error_policy"),
    ({"inputs": []}, 400, "INVALID_REQUEST", "inputs"),
    ({"inputs": [{"content": "x"}] * 257}, 400, "INVALID_REQUEST", "inputs"),
    ({"inputs": [{"content": "   "}]}, 400, "INVALID_REQUEST", "empty"),
    ({"inputs": [{"content": "word " * 30_000}]}, 413, "PAYLOAD_TOO_LARGE", "characters"),
    ({"inputs": [{"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, 400,
     "MODEL_NOT_SUPPORTED", "reader"),
])
def test_errors(extract_srv, patch, status, code, needle):
    b = body()
    b.update(patch)
    res = post(extract_srv, b)
    assert res.status_code == status, res.text
    assert res.json()["error"] == code
    assert needle in res.json()["message"]


def test_runtime_has_the_last_word_on_capabilities(extract_srv):
    res = post(extract_srv, {"model": "tiny-ner-boastful", "inputs": [{"content": "a b"}],
                             "schema": {"entities": ["PER"], "relations": [{"type": "knows"}]}})
    assert res.status_code == 400, res.text
    assert res.json()["error"] == "MODEL_NOT_SUPPORTED" and "relations" in res.json()["message"]


def test_missing_schema(extract_srv):
    res = post(extract_srv, {"model": "tiny-gliner", "inputs": [{"content": "x"}]})
    assert res.status_code == 400 and "'schema' is required" in res.json()["message"]


def test_model_required_when_several(extract_srv):
    res = post(extract_srv, {"inputs": [{"content": "x"}], "schema": {"entities": ["a"]}})
    assert res.status_code == 400 and "'model' is required" in res.json()["message"]


def test_per_item_policy(extract_srv):
    inputs = [{"id": "a", "content": REF["texts"][0]}, {"id": "b", "content": ""},
              {"id": "c", "content": [{"type": "text", "text": REF["texts"][1]}]},
              {"id": "d", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    res = post(extract_srv, {**GL, "inputs": inputs, "error_policy": "per_item", "options": {"threshold": 0.5}})
    assert res.status_code == 200, res.text
    out = res.json()
    assert [d["id"] for d in out["data"]] == ["a", "c"]
    assert [(e["index"], e["code"], e["status"]) for e in out["errors"]] == [
        (1, "INVALID_REQUEST", 400), (3, "MODEL_NOT_SUPPORTED", 400)]
    assert out["summary"] == {"total": 4, "succeeded": 2, "failed": 2}
    got = [(e["start"], e["end"]) for e in out["data"][1]["entities"]]
    assert got == [(x["start"], x["end"]) for x in REF["flat"]["0.5"][1]]  # text parts are read as the text


def test_models_catalog(extract_srv):
    m = httpx.get(extract_srv.url + "/ai/v1/models").json()
    assert m["extractors"]["tiny-gliner"]["capabilities"] == ["entities", "relations", "structures", "zero_shot"]
    assert m["extractors"]["tiny-ner"]["capabilities"] == ["entities"]
    assert m["classifiers"]["tiny-nli"]["capabilities"] == ["classifications", "zero_shot"]
    assert m["classifiers"]["tiny-topic"]["capabilities"] == ["classifications"]
    ids = {d["id"]: d["type"] for d in m["data"]}
    assert ids["tiny-gliner"] == "extractor" and ids["tiny-nli"] == "classifier"


def test_inputs_of_one_request_share_forward_passes(extract_srv):
    post(extract_srv, body())  # loaded
    stats = extract_srv.service.registry.loaded["tiny-gliner"].model.scheduler.stats
    b0, i0 = stats.batches, stats.items
    res = post(extract_srv, {**GL, "inputs": [{"content": t} for t in REF["texts"] * 4]})
    assert res.status_code == 200
    assert stats.items - i0 == 12
    assert stats.batches - b0 == 1


def test_concurrent_requests_share_forward_passes(extract_srv):
    post(extract_srv, body())
    stats = extract_srv.service.registry.loaded["tiny-gliner"].model.scheduler.stats
    b0, i0 = stats.batches, stats.items
    with cf.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda i: post(extract_srv, body(inputs=[{"content": REF["texts"][i % 3]}],
                                                               options={"threshold": 0.5})), range(16)))
    assert all(r.status_code == 200 for r in results)
    for i, r in enumerate(results):  # each answer is its own, not a neighbour's
        exp = REF["flat"]["0.5"][i % 3]
        assert [(e["start"], e["end"]) for e in r.json()["data"][0]["entities"]] == [(x["start"], x["end"]) for x in exp]
    assert stats.items - i0 == 16


def test_concurrent_calls_share_forward_passes(extract_srv):
    """16 requests at once (on the server's loop, so they surely overlap) cost a few batches."""
    import asyncio

    from inferd.extraction_types import ExtractOptions, ExtractSchema

    svc = extract_srv.service
    post(extract_srv, body())
    stats = svc.registry.loaded["tiny-gliner"].model.scheduler.stats

    async def many():
        b0 = stats.batches
        schema = ExtractSchema(entities=REF["labels"])
        rs = await asyncio.gather(*(svc.extraction.extract("tiny-gliner", [REF["texts"][i % 3]], schema,
                                                           ExtractOptions(threshold=0.5)) for i in range(16)))
        return rs, stats.batches - b0

    rs, batches = extract_srv.call(many())
    assert len(rs) == 16 and all(len(r.items) == 1 for r in rs)
    assert batches <= 4, batches
