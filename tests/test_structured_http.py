"""Structured output over real HTTP on the tiny fixture: response_format json_object and
json_schema (OpenAI and Antfly faces, batch items too), Ollama `format` ("json" or a
schema) on /api/chat and /api/generate, and raw GBNF `grammar`. The model is random, so
every answer that parses and validates (jsonschema, with format checks) is the grammar's
doing; invalid schemas and grammars are 400s that name the problem."""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import ollama
import openai
import pytest

from tests.chat_fixtures import HI
from tests.test_http_foundation import assert_envelope

# Byte-level fixture vocabulary: token id == byte value. Favouring the closing characters
# makes a random model finish its strings and containers well within max_tokens.
CLOSE_BIAS = {str(ord(c)): 4.0 for c in '"}]'}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "born": {"type": "string", "format": "date"},
        "id": {"type": "string", "format": "uuid"},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
        "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
        "home": {"$ref": "#/$defs/address"},
        "contact": {"anyOf": [{"type": "null"}, {"type": "string", "format": "email"}]},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "born", "id", "code", "score", "tags", "home", "contact", "active"],
    "additionalProperties": False,
    "$defs": {"address": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 10}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
        "required": ["city", "zip"], "additionalProperties": False}},
}
RF_SCHEMA = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
CHAT_ROUTES = ["/v1/chat/completions", "/chat/completions", "/ai/v1/generate", "/ai/v1/chat/completions"]


def valid(value, schema):
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    return value


@pytest.fixture
def srv(tiny_chat_srv):
    return tiny_chat_srv


def post(srv, path, body):
    return httpx.post(srv.url + path, json={"model": "tiny", **body}, timeout=120)


def chat(srv, path, body):
    r = post(srv, path, body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_json_schema_outputs_always_validate(srv):
    def one(seed):
        return chat(srv, CHAT_ROUTES[seed % 4], {"messages": HI, "response_format": RF_SCHEMA, "seed": seed,
                                                 "temperature": 1.0, "max_tokens": 1500, "logit_bias": CLOSE_BIAS})
    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(16)))
    names = set()
    for ch in results:
        assert ch["finish_reason"] == "stop", ch
        person = valid(json.loads(ch["message"]["content"]), PERSON)
        assert re.fullmatch(r"[A-Z]{2}-[0-9]{3}", person["code"]) and set(person["home"]) == {"city", "zip"}
        names.add(person["name"])
    assert len(names) >= 8  # sampled, not fixed


def test_json_object_is_always_an_object_on_every_face(srv):
    for seed in range(8):
        ch = chat(srv, CHAT_ROUTES[seed % 4], {"messages": HI, "response_format": {"type": "json_object"},
                                               "seed": seed, "max_tokens": 1000, "logit_bias": CLOSE_BIAS})
        assert ch["finish_reason"] == "stop" and isinstance(json.loads(ch["message"]["content"]), dict), ch
    # llama-server's extension: a schema next to json_object constrains it too
    small = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 9}},
             "required": ["n"], "additionalProperties": False}
    ch = chat(srv, "/v1/chat/completions", {"messages": HI, "response_format": {"type": "json_object", "schema": small},
                                            "seed": 1, "max_tokens": 200})
    assert 5 <= valid(json.loads(ch["message"]["content"]), small)["n"] <= 9


def test_openai_client_parses_a_strict_schema_and_streams_the_same(srv):
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    kw = dict(model="tiny", messages=HI, response_format=RF_SCHEMA, temperature=0, max_tokens=1500,
              logit_bias=CLOSE_BIAS)  # greedy: see test_tools_http on agreement and the KV cache
    r = oai.chat.completions.create(**kw)
    valid(json.loads(r.choices[0].message.content), PERSON)
    chunks = list(oai.chat.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == r.choices[0].message.content


def test_antfly_batch_items_are_constrained_each_its_own_way(srv):
    items = [{"custom_id": "s", "body": {"model": "tiny", "messages": HI, "response_format": RF_SCHEMA, "seed": 3,
                                         "max_tokens": 1500, "logit_bias": CLOSE_BIAS}},
             {"custom_id": "g", "body": {"model": "tiny", "messages": HI, "grammar": 'root ::= "yes" | "no"'}},
             {"custom_id": "bad", "body": {"model": "tiny", "messages": HI, "grammar": "root ::= ("}}]
    out = httpx.post(srv.url + "/ai/v1/generate/batch", json={"requests": items}, timeout=120).json()
    s, g, bad = out["data"]
    valid(json.loads(s["response"]["choices"][0]["message"]["content"]), PERSON)
    assert g["response"]["choices"][0]["message"]["content"] in ("yes", "no")
    assert bad["response"] is None and bad["error"]["code"] == "INVALID_REQUEST" and "grammar" in bad["error"]["message"]
    assert out["summary"] == {"total": 3, "succeeded": 2, "failed": 1}


def test_raw_grammar_on_openai_and_antfly_faces(srv):
    g = 'root ::= word ("-" word){1,2}\nword ::= [a-c]{2,4}'
    seen = set()
    for seed in range(6):
        for path in ("/v1/chat/completions", "/ai/v1/generate"):
            text = chat(srv, path, {"messages": HI, "grammar": g, "seed": seed, "max_tokens": 50})["message"]["content"]
            assert re.fullmatch(r"[a-c]{2,4}(-[a-c]{2,4}){1,2}", text), text
            seen.add(text)
        c = post(srv, "/v1/completions", {"prompt": "hello", "grammar": g, "seed": seed, "max_tokens": 50}).json()
        assert re.fullmatch(r"[a-c]{2,4}(-[a-c]{2,4}){1,2}", c["choices"][0]["text"])
    assert len(seen) >= 3


def test_ollama_format_json_and_schema(srv):
    cl = ollama.Client(host=srv.url)
    opts = {"num_predict": 1500, "temperature": 1.0}
    for seed in range(4):
        r = cl.chat(model="tiny", messages=HI, format=PERSON, options={**opts, "seed": seed})
        assert r.done_reason == "stop"
        valid(json.loads(r.message.content), PERSON)
    small = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
             "required": ["ok", "n"], "additionalProperties": False}
    g = cl.generate(model="tiny", prompt="hello", format=small, options={**opts, "seed": 9})
    valid(json.loads(g.response), small)
    raw = cl.generate(model="tiny", prompt="hello", raw=True, format=small, options={**opts, "seed": 9})
    valid(json.loads(raw.response), small)
    # "json": any object; streamed and not, the same (greedy). Its strings have no maxLength,
    # so a random model may not close them in any budget; this greedy answer ends at ~330 tokens.
    body = {"model": "tiny", "messages": [{"role": "user", "content": "the weather"}], "format": "json",
            "options": {"temperature": 0, "num_predict": 1500}}
    once = httpx.post(srv.url + "/api/chat", json={**body, "stream": False}, timeout=60).json()
    with httpx.stream("POST", srv.url + "/api/chat", json=body, timeout=60) as r:
        parts = [json.loads(x) for x in r.iter_lines() if x]
    assert "".join(p["message"]["content"] for p in parts) == once["message"]["content"]
    assert once["done_reason"] == "stop" and isinstance(json.loads(once["message"]["content"]), dict)


@pytest.mark.parametrize("path", CHAT_ROUTES)
def test_invalid_schemas_and_grammars_are_400s_naming_the_problem(srv, path):
    fam = "antfly" if path.startswith("/ai") else "openai"
    schema = lambda s: {"type": "json_schema", "json_schema": {"schema": s}}  # noqa: E731
    cases = [
        ({"response_format": schema({"type": "object", "properties": {"x": {"not": {}}}})},
         "invalid JSON schema at /properties/x: 'not'"),
        ({"response_format": schema({"type": "strange"})}, "unknown type 'strange'"),
        ({"response_format": schema({"$ref": "#/$defs/missing"})}, "points at nothing"),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "json_schema.schema is required"),
        ({"response_format": {"type": "xml"}}, "response_format.type must be"),
        ({"grammar": "root ::= ("}, "invalid grammar: line 1"),
        ({"grammar": 'start ::= "a"'}, "no 'root' rule"),
        ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "cannot be combined"),
        ({"grammar": 'root ::= "a"', "ignore_eos": True}, "ignore_eos cannot be combined"),
    ]
    for body, text in cases:
        assert_envelope(fam, post(srv, path, {"messages": HI, **body}), 400, text)


def test_ollama_invalid_formats_are_400s(srv):
    for fmt, text in [("yaml", 'format must be "json" or a JSON schema'),
                      ({"type": "object", "properties": {"x": {"if": {}}}}, "'if'")]:
        for path, body in [("/api/chat", {"messages": HI}), ("/api/generate", {"prompt": "x"})]:
            r = post(srv, path, {**body, "format": fmt, "stream": False})
            assert_envelope("ollama", r, 400, text)
