"""ONNX generators (onnxruntime-genai layout) over real HTTP: a random-weight Llama converted by
onnxruntime-genai's own model builder (scripts/make_tiny_genai.py), whose greedy tokens must equal
transformers' (reference.json); streaming through the openai client, stop strings, seeds,
batching across concurrent requests, guided JSON and tool calls, and the 400s for what
onnxruntime-genai cannot do."""

from __future__ import annotations

import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.server import serve
from tests.test_http_foundation import assert_envelope

FIXTURE = "tests/fixtures/genai/tiny-llama"
REF = json.loads(open(f"{FIXTURE}/reference.json").read())
NAME = "tiny-llama"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    shutil.copytree(FIXTURE, models / "generators" / NAME)
    with serve(models_dir=str(models), parallel=4, threads=1) as s:
        yield s


@pytest.fixture
def oai(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def handle(srv):
    return srv.service.registry.loaded[NAME].model


def complete(srv, prompt, **kw):
    body = {"model": NAME, "prompt": prompt, "n_predict": REF["max_new_tokens"], "temperature": 0,
            "return_tokens": True, **kw}
    r = httpx.post(srv.url + "/completion", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_listed_by_every_catalog(srv):
    ids = [m["id"] for m in httpx.get(srv.url + "/v1/models").json()["data"]]
    assert NAME in ids
    tags = [m["name"] for m in httpx.get(srv.url + "/api/tags").json()["models"]]
    assert any(t.split(":")[0] == NAME for t in tags), tags
    gens = httpx.get(srv.url + "/ai/v1/models").json()["generators"]
    assert gens[NAME]["format"] == "onnx"


@pytest.mark.parametrize("case", REF["cases"], ids=[c["prompt"] for c in REF["cases"]])
def test_greedy_tokens_equal_transformers(srv, case):
    out = complete(srv, case["prompt_ids"])
    assert out["tokens"] == case["generated"]
    text = complete(srv, case["prompt"])  # the text prompt tokenizes to the same ids
    assert text["tokens"] == case["generated"]


def test_streaming_over_openai_client_yields_the_same_text(oai):
    case = REF["cases"][1]
    full = oai.completions.create(model=NAME, prompt=case["prompt"], max_tokens=24, temperature=0)
    parts = [c.choices[0].text for c in oai.completions.create(model=NAME, prompt=case["prompt"], max_tokens=24,
                                                                temperature=0, stream=True)]
    assert len([p for p in parts if p]) > 1
    assert "".join(parts) == full.choices[0].text
    assert full.usage.completion_tokens == 24 and full.choices[0].finish_reason == "length"
    msgs = [{"role": "user", "content": "hello world"}]
    chat = oai.chat.completions.create(model=NAME, messages=msgs, max_tokens=16, temperature=0)
    streamed = "".join(c.choices[0].delta.content or "" for c in oai.chat.completions.create(
        model=NAME, messages=msgs, max_tokens=16, temperature=0, stream=True) if c.choices)
    assert streamed == chat.choices[0].message.content


def test_stop_sequence_ends_the_text_before_it(oai):
    case = REF["cases"][1]
    full = oai.completions.create(model=NAME, prompt=case["prompt"], max_tokens=24, temperature=0).choices[0].text
    stop = "re&"
    assert stop in full
    r = oai.completions.create(model=NAME, prompt=case["prompt"], max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].text == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_seed_reproduces_a_sampled_generation(srv):
    kw = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    a = complete(srv, REF["cases"][2]["prompt_ids"], seed=7, **kw)["tokens"]
    b = complete(srv, REF["cases"][2]["prompt_ids"], seed=7, **kw)["tokens"]
    c = complete(srv, REF["cases"][2]["prompt_ids"], seed=8, **kw)["tokens"]
    assert a == b and len(a) == REF["max_new_tokens"]
    assert a != c
    assert a != REF["cases"][2]["generated"]  # sampled, not greedy


def test_concurrent_requests_share_decode_steps(srv):
    complete(srv, "a")  # loaded
    h = handle(srv)
    before = dict(h.scheduler.batch_sizes)
    gate = threading.Event()
    # hold the worker until every request has been submitted: they then start as one batch
    held = h.scheduler.call_when_idle(lambda: gate.wait(30), reset_cache=False)
    with ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(complete, srv, c["prompt_ids"]) for c in REF["cases"]]
        deadline = 50
        while h.scheduler.queued < len(REF["cases"]) and deadline:
            threading.Event().wait(0.1)
            deadline -= 1
        gate.set()
        outs = [f.result() for f in futs]
    held.result(5)
    assert [o["tokens"] for o in outs] == [c["generated"] for c in REF["cases"]]
    grown = {k: v - before.get(k, 0) for k, v in h.scheduler.batch_sizes.items() if v > before.get(k, 0)}
    assert max(grown) == len(REF["cases"]), grown
    metrics = httpx.get(srv.url + "/metrics").text
    assert f'model="{NAME}"' in metrics
    load = httpx.get(srv.url + "/load").json()["models"][NAME]
    assert load["slots"] == 4 and load["running"] == 0
    props = httpx.get(srv.url + "/props", params={"model": NAME})
    assert props.status_code == 200 and props.json()["total_slots"] == 4, props.text


def test_more_requests_than_a_static_batch_run_side_by_side(tmp_path):
    """onnxruntime-genai's static engine carries at most 4 rows: 6 requests at once run as a
    batch of 4 and a batch of 2 in a second engine, in the same steps, each equal to its solo result."""
    models = tmp_path / "models"
    shutil.copytree(FIXTURE, models / "generators" / NAME)
    cases = REF["cases"] + REF["cases"][:2]
    with serve(models_dir=str(models), parallel=8, threads=1) as s:
        complete(s, "a")
        h = handle(s)
        gate = threading.Event()
        held = h.scheduler.call_when_idle(lambda: gate.wait(30), reset_cache=False)
        with ThreadPoolExecutor(len(cases)) as pool:
            futs = [pool.submit(complete, s, c["prompt_ids"]) for c in cases]
            for _ in range(50):
                if h.scheduler.queued >= len(cases):
                    break
                threading.Event().wait(0.1)
            gate.set()
            outs = [f.result() for f in futs]
        held.result(5)
        assert [o["tokens"] for o in outs] == [c["generated"] for c in cases]
        assert h.scheduler.batch_sizes[4] >= REF["max_new_tokens"] and h.scheduler.batch_sizes[2] >= REF["max_new_tokens"]
        assert len(h.runtime.lanes._batches) == 2


def test_json_schema_output_is_constrained(oai):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "color": {"enum": ["red", "green"]},
                                               "ok": {"type": "boolean"}},
              "required": ["n", "color", "ok"], "additionalProperties": False}
    r = oai.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hello world"}],
                                    max_tokens=60, temperature=0,
                                    response_format={"type": "json_schema",
                                                     "json_schema": {"name": "x", "schema": schema, "strict": True}})
    doc = json.loads(r.choices[0].message.content)
    assert set(doc) == {"n", "color", "ok"}
    assert isinstance(doc["n"], int) and doc["color"] in ("red", "green") and isinstance(doc["ok"], bool)
    assert r.choices[0].finish_reason == "stop"


def test_required_tool_call_is_constrained_and_parsed(oai):
    tool = {"type": "function", "function": {"name": "set_mode", "strict": True, "parameters": {
        "type": "object", "properties": {"mode": {"enum": ["on", "off"]}}, "required": ["mode"],
        "additionalProperties": False}}}
    r = oai.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hello world"}],
                                    max_tokens=200, temperature=0, tools=[tool], tool_choice="required")
    calls = r.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "set_mode"
    assert json.loads(calls[0].function.arguments)["mode"] in ("on", "off")
    assert r.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("extra, param", [({"logprobs": True}, "logprobs"),
                                          ({"frequency_penalty": 0.5}, "frequency_penalty"),
                                          ({"temperature": 0.7, "min_p": 0.1}, "min_p")])
def test_what_onnxruntime_genai_cannot_do_is_a_400_naming_it(srv, extra, param):
    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=30)
    assert_envelope("openai", r, 400, param)
    assert r.json()["error"]["param"] == param


def test_ollama_and_antfly_faces_generate(srv):
    case = REF["cases"][0]
    r = httpx.post(srv.url + "/api/generate", json={"model": NAME, "prompt": case["prompt"], "raw": True,
                                                     "stream": False,
                                                     "options": {"temperature": 0, "num_predict": 24, "repeat_penalty": 1.0}},
                   timeout=30)
    assert r.status_code == 200, r.text
    want = complete(srv, case["prompt"])["content"]
    assert r.json()["response"] == want and r.json()["eval_count"] == 24
    # Ollama's default repeat_penalty (1.1) reaches onnxruntime-genai: another text
    r = httpx.post(srv.url + "/api/generate", json={"model": NAME, "prompt": case["prompt"], "raw": True,
                                                     "stream": False, "options": {"temperature": 0, "num_predict": 24}},
                   timeout=30)
    assert r.status_code == 200 and r.json()["response"] != want, r.text
    r = httpx.post(srv.url + "/api/chat", json={"model": NAME, "messages": [{"role": "user", "content": "hi"}],
                                                 "stream": False, "options": {"temperature": 0, "num_predict": 8}},
                   timeout=30)
    assert r.status_code == 200 and r.json()["done"] is True, r.text
    msgs = [{"role": "user", "content": "hello world"}]
    r = httpx.post(srv.url + "/ai/v1/generate", json={"model": NAME, "messages": msgs, "max_tokens": 16,
                                                       "temperature": 0}, timeout=30)
    assert r.status_code == 200, r.text
    body = {"model": NAME, "messages": msgs, "max_tokens": 16, "temperature": 0}
    chat = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=30).json()
    # the same engine behind both faces
    assert r.json()["choices"][0]["message"]["content"] == chat["choices"][0]["message"]["content"]


def test_raw_gbnf_grammar_is_enforced(srv):
    for seed in (1, 2, 3):
        out = complete(srv, "hello", grammar='root ::= ("yes" | "no") "!"', temperature=1.0, top_k=0, min_p=0.0,
                       seed=seed)
        assert out["content"] in ("yes!", "no!"), out["content"]


def test_an_onnx_folder_without_genai_config_is_a_501_naming_the_layout(tmp_path):
    d = tmp_path / "generators" / "plain"
    d.mkdir(parents=True)
    (d / "model.onnx").write_bytes(b"")
    with serve(models_dir=str(tmp_path)) as s:
        r = httpx.post(s.url + "/v1/chat/completions", json={"model": "plain", "messages": [
            {"role": "user", "content": "hi"}]}, timeout=30)
    assert_envelope("openai", r, 501, "genai_config.json")
