"""Structures: a generator fills a JSON Schema under its grammar, so every answer validates
(the tiny random GGUF writes nonsense, but always nonsense of the right shape)."""

from __future__ import annotations

import jsonschema
import pytest

from inferd.api.antfly.extract import field_schema
from tests.extract_fixtures import extract_srv, post  # noqa: F401

FIELDS = {"name": "string", "age": "integer", "height": "number", "member": "boolean", "tags": "string[]",
          "born": "date", "summary": "a one-line summary of the text",
          "kind": {"enum": ["person", "place", "thing"]}}
TEXTS = ["Ada Lovelace was born in London in 1815.", "The Eiffel Tower is 330 metres tall.", "bake the bread"]


def schema_of(fields: dict) -> dict:
    return {"type": "object", "properties": {k: field_schema(v) for k, v in fields.items()},
            "required": list(fields), "additionalProperties": False}


def test_structures_always_validate(extract_srv):
    body = {"model": "tiny", "inputs": [{"content": t} for t in TEXTS],
            "schema": {"structures": {"record": {"fields": FIELDS}, "short": {"fields": {"n": "int", "ok": "bool"}}}}}
    res = post(extract_srv, body, timeout=300)
    assert res.status_code == 200, res.text
    out = res.json()
    assert out["model"] == "tiny" and len(out["data"]) == 3
    for d in out["data"]:
        assert set(d["structures"]) == {"record", "short"}
        jsonschema.validate(d["structures"]["record"], schema_of(FIELDS))
        jsonschema.validate(d["structures"]["short"], schema_of({"n": "int", "ok": "bool"}))
        assert d["structures"]["record"]["kind"] in ("person", "place", "thing")
    assert out["usage"]["completion_tokens"] > 0


def test_structures_through_the_extractors_generator(extract_srv):
    """tiny-gliner's manifest names 'tiny' as its generator: entities and structures in one request."""
    body = {"model": "tiny-gliner", "inputs": [{"content": TEXTS[0]}],
            "schema": {"entities": ["person"], "structures": {"who": {"fields": {"person": "string", "year": "integer"}}}},
            "options": {"threshold": 0.5}}
    res = post(extract_srv, body, timeout=300)
    assert res.status_code == 200, res.text
    d = res.json()["data"][0]
    jsonschema.validate(d["structures"]["who"], schema_of({"person": "string", "year": "integer"}))


def test_structures_need_a_generator(extract_srv):
    res = post(extract_srv, {"model": "tiny-ner", "inputs": [{"content": "x"}],
                             "schema": {"structures": {"s": {"fields": {"a": "string"}}}}})
    assert res.status_code == 400
    assert res.json()["error"] == "MODEL_NOT_SUPPORTED" and "structures" in res.json()["message"]


def test_structure_schema_the_grammar_cannot_enforce_is_400(extract_srv):
    res = post(extract_srv, {"model": "tiny", "inputs": [{"content": "x"}],
                             "schema": {"structures": {"s": {"fields": {"a": {"type": "integer", "multipleOf": 3}}}}}})
    assert res.status_code == 400 and "multipleOf" in res.json()["message"]


@pytest.mark.parametrize("word,expected", [("integer", {"type": "integer"}), ("list[number]", "array"),
                                           ("a free description", "string")])
def test_field_types(word, expected):
    s = field_schema(word)
    assert s == expected if isinstance(expected, dict) else s["type"] == expected


def test_a_client_that_leaves_stops_its_generations(extract_srv):
    """Structures run as generations; when the client hangs up they are cancelled, and the
    generator's slots are free again, instead of writing records for nobody."""
    import httpx

    from tests.test_gen_http import runtime, slow_decode, wait_for

    assert post(extract_srv, {"model": "tiny", "inputs": [{"content": "x"}],
                              "schema": {"structures": {"s": {"fields": {"n": "int"}}}}}).status_code == 200
    handle = runtime(extract_srv)
    undo = slow_decode(handle, 0.02)
    try:
        body = {"model": "tiny", "inputs": [{"content": t} for t in TEXTS],
                "schema": {"structures": {"record": {"fields": FIELDS}}}}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(extract_srv.url + "/ai/v1/extract", json=body, timeout=0.5)
        wait_for(lambda: handle.scheduler.active == 0 and handle.scheduler.queued == 0, timeout=5)
    finally:
        undo()
