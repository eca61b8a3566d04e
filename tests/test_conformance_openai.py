"""The OpenAI face against OpenAI's own contract: responses validate against the official
OpenAPI schemas (tests/openai_schemas/, vendored), and the behaviours issue 11 found wrong:
refusal, sparse models, cut tool calls, unknown models and roles, n > 1, legacy logprobs,
over-long embedding inputs, json_object schemas, empty rerank lists, /detokenize, /metrics.
All on the tiny fixtures over real HTTP, through the official `openai` client where it fits."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferd.api.openai.gen import completion_logprobs
from inferd.types import TokenLogprob
from tests.chat_fixtures import HI, generator_dir
from tests.server import serve
from tests.test_http_foundation import assert_envelope

FIX = Path(__file__).parent / "fixtures"
ONNX = FIX / "onnx"
def openapi_nullable(node):
    """OpenAPI's `nullable: true` (still used in places of the 3.1 document) as JSON Schema: the
    value may also be null."""
    if isinstance(node, dict):
        node = {k: openapi_nullable(v) for k, v in node.items()}
        if node.pop("nullable", False):
            node = {"anyOf": [node, {"type": "null"}]}
        return node
    return [openapi_nullable(v) for v in node] if isinstance(node, list) else node


DOC = openapi_nullable(json.loads((Path(__file__).parent / "openai_schemas" / "openai-openapi.subset.json").read_text()))
TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"],
    "additionalProperties": False}}}


def check(schema: str, instance) -> None:
    """Validate against one of the vendored OpenAI schemas (its $refs resolve in the document)."""
    jsonschema.Draft202012Validator({**DOC, "$ref": f"#/components/schemas/{schema}"}).validate(instance)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")
    models = [f"embedder:tiny-embed={ONNX / 'tiny-bert-embed'}", f"embedder:tiny-splade={ONNX / 'tiny-bert-splade'}",
              f"reranker:tiny-rerank={ONNX / 'tiny-bert-rerank'}"]
    with serve(models_dir=str(d), models=models, parallel=8, threads=1) as s:
        yield s


def post(srv, path, body, **kw):
    return httpx.post(srv.url + path, json=body, timeout=120, **kw)


def chat(srv, **body):
    r = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI, "max_tokens": 8, **body})
    assert r.status_code == 200, r.text
    return r.json()


def sse(srv, path, body) -> list[dict]:
    with httpx.stream("POST", srv.url + path, json=body, timeout=120) as r:
        assert r.status_code == 200
        lines = [x[6:] for x in r.iter_lines() if x.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


# ---- the vendored schemas -----------------------------------------------------------------------
def test_vendored_schemas_say_where_they_come_from():
    assert DOC["source"].startswith("https://github.com/openai/openai-openapi") and len(DOC["commit"]) == 40
    assert DOC["openapi_version"] == "2.3.0"
    with pytest.raises(jsonschema.ValidationError):  # the schemas are strict enough to fail
        check("CreateChatCompletionResponse", {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                                               "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                                            "message": {"role": "assistant", "content": "hi"}}]})


def test_chat_responses_validate(srv):
    for body in ({}, {"logprobs": True, "top_logprobs": 3}, {"n": 3, "temperature": 1.0, "seed": 4},
                 {"tools": [TOOL], "tool_choice": "required", "max_tokens": 400}):
        r = chat(srv, **body)
        check("CreateChatCompletionResponse", r)
        assert all(c["message"]["refusal"] is None for c in r["choices"])  # required by the schema


def test_stream_chunks_validate(srv):
    for body in ({"logprobs": True, "top_logprobs": 2}, {"n": 2}, {"tools": [TOOL], "tool_choice": "required",
                                                                   "max_tokens": 400}):
        chunks = sse(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI, "max_tokens": 8, "stream": True,
                                                   "stream_options": {"include_usage": True}, **body})
        for c in chunks:
            check("CreateChatCompletionStreamResponse", c)
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


def test_completions_embeddings_models_and_errors_validate(srv):
    r = post(srv, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 6, "logprobs": 3, "n": 2})
    check("CreateCompletionResponse", r.json())
    r = post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": ["a cat", "a dog"]})
    check("CreateEmbeddingResponse", r.json())
    check("ListModelsResponse", httpx.get(srv.url + "/v1/models").json())
    check("Model", httpx.get(srv.url + "/v1/models/tiny").json())
    for bad in (post(srv, "/v1/chat/completions", {"model": "ghost", "messages": HI}),
                post(srv, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}),
                post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": []})):
        assert bad.status_code in (400, 404)
        check("ErrorResponse", bad.json())


# ---- errors ----------------------------------------------------------------------------------------
def test_unknown_model_is_invalid_request_error_model_not_found(srv):
    b = assert_envelope("openai", post(srv, "/v1/chat/completions", {"model": "ghost", "messages": HI}), 404, "ghost")
    assert b["error"]["type"] == "invalid_request_error" and b["error"]["code"] == "model_not_found"
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="ghost", messages=HI)
    assert e.value.code == "model_not_found"


def test_unknown_role_is_400(srv):
    r = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}]})
    b = assert_envelope("openai", r, 400, "'wizard'")
    assert b["error"]["param"] == "messages.0.role"
    for role in ("system", "developer", "user"):  # the roles OpenAI takes are fine
        assert chat(srv, messages=[{"role": role, "content": "hi"}, *HI], max_tokens=1)["choices"]


def test_sparse_model_on_openai_embeddings_points_to_the_antfly_route(srv):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
    with pytest.raises(openai.BadRequestError) as e:  # the client's default request asks for base64
        client.embeddings.create(model="tiny-splade", input="rain")
    assert "/ai/v1/embeddings" in e.value.message and "sparse" in e.value.message
    r = post(srv, "/ai/v1/embeddings", {"model": "tiny-splade", "input": "rain"})
    assert set(r.json()["data"][0]["embedding"]) == {"indices", "values"}


def test_json_object_with_a_schema_that_is_not_a_schema_is_400(srv):
    for schema in (123, "abc", [1]):
        r = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI,
                                               "response_format": {"type": "json_object", "schema": schema}})
        assert_envelope("openai", r, 400, "response_format.schema must be a JSON schema")
    ok = chat(srv, max_tokens=60, temperature=0, response_format={
        "type": "json_object", "schema": {"type": "object", "properties": {"a": {"type": "boolean"}},
                                          "required": ["a"], "additionalProperties": False}})
    content = ok["choices"][0]["message"]["content"]
    if ok["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(content)["a"], bool)


def test_empty_documents_on_rerank_routes_are_400(srv):
    for path, body, fam in (("/v1/rerank", {"documents": []}, "openai"), ("/rerank", {"documents": []}, "openai"),
                            ("/ai/v1/rerank", {"prompts": []}, "antfly"),
                            ("/ai/v1/rerank_multimodal", {"documents": []}, "antfly")):
        r = post(srv, path, {"model": "tiny-rerank", "query": "what causes rain", **body})
        assert_envelope(fam, r, 400, "must not be empty")
    ok = post(srv, "/v1/rerank", {"model": "tiny-rerank", "query": "rain", "documents": ["clouds", "bread"]})
    assert len(ok.json()["results"]) == 2


def test_over_long_embedding_input_is_400_naming_the_limit_unless_truncate(srv):
    long = "fox " * 100  # the tiny embedder's limit is 64 tokens
    r = post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": ["short", long]})
    b = assert_envelope("openai", r, 400, "limit of 64 tokens")
    assert "input[1]" in b["error"]["message"] and "truncate" in b["error"]["message"]
    ok = post(srv, "/v1/embeddings", {"model": "tiny-embed", "input": ["short", long], "truncate": True})
    assert ok.status_code == 200 and len(ok.json()["data"]) == 2
    with pytest.raises(openai.BadRequestError):
        openai.OpenAI(base_url=srv.url + "/v1", api_key="x").embeddings.create(model="tiny-embed", input=long)
    # Ollama keeps its default (truncate: true); Antfly cuts and says which items it cut
    assert post(srv, "/api/embed", {"model": "tiny-embed", "input": long}).status_code == 200
    a = post(srv, "/ai/v1/embeddings", {"model": "tiny-embed", "input": ["short", long, "x"]}).json()
    assert a["truncated"] == [1] and len(a["data"]) == 3
    assert "truncated" not in post(srv, "/ai/v1/embeddings", {"model": "tiny-embed", "input": "short"}).json()


# ---- tool calls cut by max_tokens ------------------------------------------------------------------
def test_a_forced_tool_call_cut_by_max_tokens_is_not_content(srv):
    body = {"tools": [TOOL], "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 6, "seed": 1}
    r = chat(srv, **body)
    c = r["choices"][0]
    assert c["finish_reason"] == "length" and not c["message"].get("tool_calls")
    assert not c["message"]["content"]  # was '<tool_call>\n{"name" : ...' before
    chunks = sse(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI, "stream": True, **body})
    assert "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"]) == ""
    assert [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]][-1] == "length"


def test_complete_calls_before_a_cut_one_stay(srv):
    for seed in range(30):  # find a seed whose forced answer has two or more calls
        body = {"tools": [TOOL], "tool_choice": "required", "max_tokens": 1500, "seed": seed, "temperature": 1.0}
        full = chat(srv, **body)
        calls = full["choices"][0]["message"].get("tool_calls") or []
        if full["choices"][0]["finish_reason"] == "tool_calls" and len(calls) >= 2:
            break
    else:
        pytest.fail("no seed gave two calls")
    n = full["usage"]["completion_tokens"]
    cut = chat(srv, **{**body, "max_tokens": n - 1})  # the same sampling, one token short of the last call's end
    c = cut["choices"][0]
    assert c["finish_reason"] == "length" and not c["message"]["content"]
    assert [t["function"] for t in c["message"]["tool_calls"]] == [t["function"] for t in calls[:-1]]
    chunks = sse(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI, "stream": True,
                                               **{**body, "max_tokens": n - 1}})
    streamed = [t["function"]["name"] for ch in chunks if ch["choices"]
                for t in ch["choices"][0]["delta"].get("tool_calls") or []]
    assert len(streamed) == len(calls) - 1
    assert not "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])


# ---- n > 1 -----------------------------------------------------------------------------------------
def test_n_choices_are_sampled_separately_and_greedy_ones_equal_a_single_answer(srv):
    one = chat(srv, temperature=0, max_tokens=12)["choices"][0]["message"]["content"]
    r = chat(srv, temperature=0, max_tokens=12, n=4)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    assert all(c["message"]["content"] == one for c in r["choices"])  # the copied KV cells are the prompt's
    sampled = chat(srv, temperature=1.0, max_tokens=12, n=4, seed=7, logprobs=True, top_logprobs=2)
    texts = [c["message"]["content"] for c in sampled["choices"]]
    assert len(set(texts)) > 1  # each choice its own sampler
    for c in sampled["choices"]:
        assert c["finish_reason"] in ("stop", "length") and len(c["logprobs"]["content"]) >= 1
    assert sampled["usage"]["completion_tokens"] == sum(len(c["logprobs"]["content"]) for c in sampled["choices"])
    again = chat(srv, temperature=1.0, max_tokens=12, n=4, seed=7)
    assert [c["message"]["content"] for c in again["choices"]] == texts  # seeded: reproducible
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
    got = client.chat.completions.create(model="tiny", messages=HI, n=3, max_tokens=4, temperature=0)
    assert len(got.choices) == 3 and got.choices[2].index == 2


def test_n_prefills_the_prompt_once(srv):
    prompt = "count " * 150
    chat(srv, messages=[{"role": "user", "content": "warm"}], max_tokens=1)
    rt = srv.service.registry.loaded["tiny"].model.runtime  # the handle's llama.cpp runtime
    real, fed = rt.decode, []
    rt.decode = lambda entries: (fed.append(sum(len(t) for _s, t, _p, _w in entries)), real(entries))[1]
    try:
        r = chat(srv, messages=[{"role": "user", "content": prompt}], n=4, max_tokens=5, temperature=1.0, seed=3,
                 ignore_eos=True)
    finally:
        del rt.decode
    p = r["usage"]["prompt_tokens"]
    assert p > 150 and r["usage"]["completion_tokens"] == 20
    # the prompt once (less what is cached) plus one token per choice per step, never 4 prompts
    assert sum(fed) <= p + 20 and sum(fed) < 2 * p


def test_n_streams_carry_each_choice_index_and_finish(srv):
    chunks = sse(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI, "max_tokens": 6, "n": 3,
                                               "stream": True, "temperature": 0})
    finishes = {ch["choices"][0]["index"]: ch["choices"][0]["finish_reason"] for ch in chunks
                if ch["choices"] and ch["choices"][0]["finish_reason"]}
    assert sorted(finishes) == [0, 1, 2]
    texts = {i: "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks
                        if ch["choices"] and ch["choices"][0]["index"] == i) for i in range(3)}
    assert texts[0] == texts[1] == texts[2] and texts[0]
    comp = sse(srv, "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 4, "n": 2, "stream": True})
    assert {ch["choices"][0]["index"] for ch in comp if ch["choices"]} == {0, 1}


def test_a_group_waits_for_free_slots_and_a_client_that_leaves_frees_them_all(tmp_path):
    import threading
    import time

    d = tmp_path / "m"
    generator_dir(d, "tiny")
    with serve(models_dir=str(d), parallel=4, threads=1) as s:
        greedy = httpx.post(s.url + "/v1/chat/completions", json={"model": "tiny", "messages": HI, "max_tokens": 3,
                                                                  "temperature": 0}).json()
        one = greedy["choices"][0]["message"]["content"]
        long = {"model": "tiny", "messages": [{"role": "user", "content": "long"}], "max_tokens": 400,
                "ignore_eos": True}
        t = threading.Thread(target=httpx.post, args=(s.url + "/v1/chat/completions",), kwargs={"json": long,
                                                                                                 "timeout": 120})
        t.start()
        rt = None
        while rt is None or rt.scheduler.active == 0:  # the long one holds a slot: 3 are free, 4 are needed
            time.sleep(0.01)
            entry = s.service.registry.loaded.get("tiny")
            rt = entry.model if entry else None
        r = httpx.post(s.url + "/v1/chat/completions", json={"model": "tiny", "messages": HI, "max_tokens": 3,
                                                             "temperature": 0, "n": 4}, timeout=120).json()
        t.join()
        assert [c["message"]["content"] for c in r["choices"]] == [one] * 4
        with httpx.stream("POST", s.url + "/v1/chat/completions", json={**long, "n": 4, "stream": True}) as resp:
            for i, _line in enumerate(resp.iter_lines()):
                if i > 12:
                    break  # leave mid-stream
        deadline = time.time() + 10
        while (rt.scheduler.active or s.service.admission.in_flight) and time.time() < deadline:
            time.sleep(0.02)
        assert rt.scheduler.active == 0 and s.service.admission.in_flight == 0  # every choice stopped


def test_n_beyond_the_limits_is_400(srv):
    assert_envelope("openai", post(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI, "n": 9}), 400, "n")
    assert_envelope("openai", post(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI, "n": 0}), 400, "n")
    with serve(models=[f"tiny={FIX / 'gguf' / 'tiny-llama.gguf'}"], parallel=2, threads=1) as s:
        r = httpx.post(s.url + "/v1/chat/completions", json={"model": "tiny", "messages": HI, "n": 3}, timeout=60)
        assert_envelope("openai", r, 400, "between 1 and 2")


# ---- legacy completions logprobs -------------------------------------------------------------------
def test_legacy_top_logprobs_keep_the_larger_value_and_agree_with_the_sampled_token():
    t = TokenLogprob(token=5, text="a", bytes=b"a", logprob=-0.841,
                     top=[(9, "b", b"b", -0.5), (5, "a", b"a", -0.841), (7, "a", b"a", -3.705), (8, "b", b"b", -2.0)])
    lp = completion_logprobs([t], 0)
    assert lp["top_logprobs"] == [{"b": -0.5, "a": -0.841}]
    assert lp["top_logprobs"][0][lp["tokens"][0]] == lp["token_logprobs"][0]


def test_legacy_logprobs_over_http_agree(srv):
    for seed in range(3):
        r = post(srv, "/v1/completions", {"model": "tiny", "prompt": "hello world", "max_tokens": 16, "logprobs": 5,
                                          "temperature": 1.0, "seed": seed}).json()
        lp = r["choices"][0]["logprobs"]
        for tok, val, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            assert top[tok] == val and all(v <= 0 for v in top.values())


# ---- llama-server helpers ----------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cn", "Co"]), max_size=40))
def test_detokenize_is_the_inverse_of_tokenize(srv, text):
    if "<|" in text:
        return  # special-token text (the property is for text without special tokens)
    toks = post(srv, "/tokenize", {"model": "tiny", "content": text}).json()["tokens"]
    assert post(srv, "/detokenize", {"model": "tiny", "tokens": toks}).json()["content"] == text


def test_detokenize_keeps_spaces_before_punctuation(srv):
    for text in ("What is the capital of France ?", "Hello , world !", "  two  spaces "):
        toks = post(srv, "/tokenize", {"model": "tiny", "content": text}).json()["tokens"]
        assert post(srv, "/detokenize", {"model": "tiny", "tokens": toks}).json()["content"] == text


def test_metrics_label_curl_posts_by_route(srv):
    # curl -d sends application/x-www-form-urlencoded; inferd reads it as JSON and must label it too
    r = httpx.post(srv.url + "/tokenize", content=b'{"model": "tiny", "content": "x"}',
                   headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200
    httpx.post(srv.url + "/tokenize", content=b'{"model": "tiny", "content": "x"}')  # no content type at all
    text = httpx.get(srv.url + "/metrics").text
    line = [x for x in text.splitlines() if x.startswith("inferd_requests_total") and 'route="/tokenize"' in x]
    assert line and int(line[0].rsplit(" ", 1)[1]) >= 2
    assert 'route="unmatched",status="200"' not in text
