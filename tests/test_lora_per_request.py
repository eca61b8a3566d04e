"""Per-request LoRA over real HTTP on the tiny fixture and its rank-4 adapter: llama-server's
`lora: [{id, scale}]` on the OpenAI, Ollama and Antfly generation routes and `base:adapter`
model names give, token for token, what a /set_lora switch gives (greedy); GET/POST
/lora-adapters are the global scales; requests with different adapter sets stream at the same
time and both progress, each with the output it would have alone."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from tests.lora_helpers import PROMPT, greedy, lora_server, set_lora, slow_decode, unset_lora, wait_until
from tests.test_http_foundation import assert_envelope


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with lora_server(tmp_path_factory.mktemp("models")) as s:
        yield s


def ollama(srv, model="tiny", n=24, **extra):
    return greedy(srv, model, n, **extra)


def completion(srv, model="tiny", n=24, **extra):
    r = httpx.post(srv.url + "/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": n,
                                                       "temperature": 0, **extra}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def ids(srv):
    return {a["name"]: a["id"] for a in httpx.get(srv.url + "/lora-adapters", params={"model": "tiny"}).json()}


def switched(srv, name, fn):
    """`fn()` with adapter `name` switched on for the model (the reference run)."""
    assert set_lora(srv, model="tiny", name=name).status_code == 200
    try:
        return fn()
    finally:
        unset_lora(srv, model="tiny")


def test_per_request_lora_equals_the_switched_adapter_token_for_token(srv):
    base, base_text = ollama(srv), completion(srv)
    ref, ref_text = switched(srv, "style", lambda: (ollama(srv), completion(srv)))
    assert ref != base and ref_text != base_text
    style = ids(srv)["style"]
    lora = [{"id": style, "scale": 1.0}]
    assert ollama(srv, lora=lora) == ref  # Ollama: top-level
    assert completion(srv, lora=lora) == ref_text  # OpenAI: an extra body field
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
    c = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0, extra_body={"lora": lora})
    assert c.choices[0].text == ref_text
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0}
    ref_chat = switched(srv, "style", lambda: httpx.post(srv.url + "/ai/v1/generate", json={"model": "tiny", **chat},
                                                         timeout=60).json())
    got = httpx.post(srv.url + "/ai/v1/generate", json={"model": "tiny", "lora": lora, **chat}, timeout=60).json()
    assert got["choices"][0]["message"]["content"] == ref_chat["choices"][0]["message"]["content"]
    # the adapter's own served name; and nothing stayed switched on
    assert ollama(srv, model="tiny:style") == ref and completion(srv, model="tiny:style") == ref_text
    named = httpx.post(srv.url + "/v1/completions", json={"model": "tiny:style", "prompt": PROMPT, "max_tokens": 2})
    assert named.json()["model"] == "tiny:style"  # the response names the adapter's model
    assert ollama(srv) == base and ollama(srv, lora=[]) == base
    # every adapter at scale 0 is the base weights (llama-server: a left-out adapter is 0)
    assert ollama(srv, lora=[{"id": style, "scale": 0.0}]) == base


def test_scales_are_real(srv):
    style = ids(srv)["style"]
    full, half = ollama(srv, lora=[{"id": style, "scale": 1.0}]), ollama(srv, lora=[{"id": style, "scale": 0.5}])
    assert half != full and half != ollama(srv)


def test_lora_adapters_routes_set_the_global_scales(srv):
    table = httpx.get(srv.url + "/lora-adapters", params={"model": "tiny"}).json()
    assert [(a["id"], a["name"], a["scale"]) for a in table] == [(0, "folded", 0.0), (1, "style", 0.0)]
    assert table[1]["path"].endswith("loras/style.gguf") and table[0]["path"].endswith("loras/folded/adapter.gguf")
    ref = switched(srv, "style", lambda: ollama(srv))
    r = httpx.post(srv.url + "/lora-adapters", params={"model": "tiny"}, json=[{"id": 1, "scale": 1.0}])
    assert r.status_code == 200 and r.json() == {"success": True}
    try:
        assert [a["scale"] for a in httpx.get(srv.url + "/lora-adapters?model=tiny").json()] == [0.0, 1.0]
        models = {m["id"]: m for m in httpx.get(srv.url + "/v1/models").json()["data"]}
        assert models["tiny"]["lora"] == "style"
        assert ollama(srv) == ref  # the default set of requests without `lora`
        assert ollama(srv, lora=[]) != ref  # a request's own set wins over the global scales
    finally:
        assert httpx.post(srv.url + "/lora-adapters?model=tiny", json=[]).status_code == 200
    assert [a["scale"] for a in httpx.get(srv.url + "/lora-adapters?model=tiny").json()] == [0.0, 0.0]


def test_adapters_are_listed_as_models(srv):
    models = {m["id"]: m for m in httpx.get(srv.url + "/v1/models").json()["data"]}
    assert models["tiny:style"]["parent"] == "tiny" and models["tiny:folded"]["parent"] == "tiny"
    assert not any(k.startswith("other:") for k in models)
    one = httpx.get(srv.url + "/v1/models/tiny:style").json()
    assert one["id"] == "tiny:style" and one["parent"] == "tiny"


def test_bad_lora_fields(srv):
    url = srv.url + "/v1/completions"
    base = {"model": "tiny", "prompt": PROMPT, "max_tokens": 2}
    assert_envelope("openai", httpx.post(url, json={**base, "lora": [{"id": 7, "scale": 1}]}), 400, "ids are 0..1")
    assert_envelope("openai", httpx.post(url, json={**base, "lora": [{"id": 1, "scale": 1e6}]}), 400, "scale")
    assert_envelope("openai", httpx.post(url, json={**base, "lora": [{"id": 1, "scale": 1}, {"id": 1, "scale": 2}]}),
                    400, "listed twice")
    assert_envelope("openai", httpx.post(url, json={**base, "lora": [{"id": -1, "scale": 1}]}), 400, "lora.0.id")
    assert_envelope("openai", httpx.post(url, json={**base, "model": "other", "lora": [{"id": 0, "scale": 1}]}),
                    400, "no LoRA adapters")
    assert_envelope("openai", httpx.post(url, json={**base, "model": "tiny:style", "lora": []}), 400, "names an adapter")
    assert_envelope("openai", httpx.post(url, json={**base, "model": "tiny:nope"}), 404, "tiny:nope")
    r = httpx.post(srv.url + "/lora-adapters?model=tiny", json=[{"id": 9, "scale": 1}])
    assert_envelope("openai", r, 400, "ids are 0..1")
    assert_envelope("openai", httpx.post(srv.url + "/lora-adapters?model=tiny", json={"id": 1}), 400, None)


def stream_tokens(srv, lora, n, out, key):
    """Token arrival times of a streamed completion with adapter set `lora`."""
    times, text = [], []
    with httpx.stream("POST", srv.url + "/v1/completions",
                      json={"model": "tiny", "prompt": PROMPT, "max_tokens": n, "temperature": 0, "stream": True,
                            "lora": lora}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                c = json.loads(line[6:])["choices"]
                if c and c[0]["text"]:
                    times.append(time.monotonic())
                    text.append(c[0]["text"])
    out[key] = (times, "".join(text))


def test_two_adapter_sets_stream_at_once_and_both_progress(srv):
    style, folded = ids(srv)["style"], ids(srv)["folded"]
    a_set, b_set = [{"id": style, "scale": 1.0}], [{"id": folded, "scale": 0.5}]
    alone_a, alone_b = completion(srv, n=40, lora=a_set), completion(srv, n=40, lora=b_set)
    handle = srv.service.registry.loaded["tiny"].model
    slices, switches = handle.scheduler.lora_slices, handle.scheduler.lora_slices.switches
    restore = slow_decode(handle, 0.05)  # A: 40 steps, longer than the longest slice (1 s)
    got: dict = {}
    try:
        ta = threading.Thread(target=stream_tokens, args=(srv, a_set, 40, got, "a"))
        ta.start()
        wait_until(lambda: handle.scheduler.active > 0)  # A is admitted and generating
        time.sleep(0.2)
        tb = threading.Thread(target=stream_tokens, args=(srv, b_set, 40, got, "b"))
        tb.start()
        ta.join(60)
        tb.join(60)
    finally:
        restore()
    (a_times, a_text), (b_times, b_text) = got["a"], got["b"]
    assert a_text == alone_a and b_text == alone_b  # each set decoded with its own adapters
    assert alone_a != alone_b
    # the sets took turns: B began before A finished, and A went on after B began and before B finished
    assert b_times[0] < a_times[-1]
    assert any(b_times[0] < t < b_times[-1] for t in a_times)
    assert slices.switches - switches >= 3  # A -> B -> A at least: turns, not one after the other


def test_a_request_with_its_own_set_does_not_wait_for_a_default_switch(srv):
    own_ref = ollama(srv, n=4, lora=[])
    handle = srv.service.registry.loaded["tiny"].model
    restore = slow_decode(handle, 0.05)
    got: dict = {}

    def run(key, fn):
        got[key] = fn()
        got[key + "_at"] = time.monotonic()
    try:
        first = threading.Thread(target=run, args=("first", lambda: ollama(srv, n=30)))
        first.start()
        wait_until(lambda: handle.scheduler.active > 0)
        switch = threading.Thread(target=run, args=("switch", lambda: set_lora(srv, model="tiny", name="style")))
        switch.start()
        time.sleep(0.2)  # the switch waits for `first`
        own = threading.Thread(target=run, args=("own", lambda: ollama(srv, n=4, lora=[])))
        own.start()
        for t in (first, switch, own):
            t.join(60)
    finally:
        restore()
        unset_lora(srv, model="tiny")
    assert got["switch"].status_code == 200
    assert got["own"] == own_ref and got["own_at"] < got["switch_at"]  # ran while the switch waited
