"""LoRA switching over real HTTP on the tiny fixture and its rank-4 adapter: /set_lora
changes the greedy output, /unset_lora restores it token for token; adapters as a file or
a folder; the catalog shows the active one; names that are paths are 400s, unknown ones
404s; a switch waits for the model's active requests, holds later ones, and leaves other
models alone; a model reloaded later gets its adapter back."""

import threading
import time

import httpx
import pytest

from tests.chat_fixtures import generator_dir
from tests.lora_helpers import greedy, lora_server, set_lora, slow_decode, unset_lora, wait_until
from tests.server import serve
from tests.test_http_foundation import assert_envelope


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with lora_server(tmp_path_factory.mktemp("models")) as s:
        yield s


def catalog(srv, model="tiny"):
    oai = {m["id"]: m for m in httpx.get(srv.url + "/v1/models").json()["data"]}[model]
    one = httpx.get(srv.url + f"/v1/models/{model}").json()
    antfly = httpx.get(srv.url + "/ai/v1/models").json()["generators"][model]
    assert oai["lora"] == one["lora"] == antfly["lora"]
    return oai["lora"], antfly["loras"]


def test_a_lora_changes_greedy_output_and_unset_restores_it_token_for_token(srv):
    base, other = greedy(srv), greedy(srv, "other")
    assert catalog(srv) == (None, ["folded", "style"]) and catalog(srv, "other") == (None, [])
    r = set_lora(srv, model="tiny", name="style")
    assert r.status_code == 200 and r.json() == {"model": "tiny", "lora": "style", "previous": None}
    adapted = greedy(srv)
    assert adapted != base and len(adapted) == len(base) == 24
    assert catalog(srv)[0] == "style"
    assert greedy(srv, "other") == other  # another model is not affected
    # the same weights as a folder adapter: the same output
    assert set_lora(srv, model="tiny", name="folded").json()["previous"] == "style"
    assert greedy(srv) == adapted and catalog(srv)[0] == "folded"
    r = unset_lora(srv, model="tiny")
    assert r.status_code == 200 and r.json() == {"model": "tiny", "lora": None, "previous": "folded"}
    assert greedy(srv) == base and catalog(srv)[0] is None
    # chat goes through the adapter too
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0}
    plain = httpx.post(srv.url + "/v1/chat/completions", json=chat).json()["choices"][0]["message"]["content"]
    set_lora(srv, model="tiny", name="style")
    try:
        assert httpx.post(srv.url + "/v1/chat/completions", json=chat).json()["choices"][0]["message"]["content"] != plain
    finally:
        unset_lora(srv, model="tiny")


def test_bad_names_and_models(srv):
    for name in ["../style", "a/b", "/etc/passwd", "..", ".hidden", "a\\b", "", "   "]:
        assert_envelope("openai", set_lora(srv, model="tiny", name=name), 400, None)
    assert_envelope("openai", set_lora(srv, model="tiny", name="../style"), 400, "no paths")
    assert_envelope("openai", set_lora(srv, model="tiny"), 400, "'name' is required")
    assert_envelope("openai", set_lora(srv, model="tiny", name="nope"), 404, "adapters: folded, style")
    assert_envelope("openai", set_lora(srv, model="other", name="style"), 404, "no loras/ folder")
    assert_envelope("openai", set_lora(srv, model="ghost", name="style"), 404, "ghost")
    assert_envelope("openai", set_lora(srv, name="style"), 400, "'model' is required (2 generators")
    assert_envelope("openai", unset_lora(srv), 400, "'model' is required")
    assert catalog(srv)[0] is None  # nothing changed


def test_model_may_be_omitted_with_one_generator(tmp_path):
    generator_dir(tmp_path, "solo", n_ctx=256, loras={"style": "file"})
    with serve(models_dir=str(tmp_path), threads=1) as s:
        base = greedy(s, "solo")
        assert set_lora(s, name="style").json() == {"model": "solo", "lora": "style", "previous": None}
        assert greedy(s, "solo") != base
        assert httpx.post(s.url + "/unset_lora").json()["model"] == "solo"  # no body at all
        assert greedy(s, "solo") == base


def test_switch_waits_for_active_requests_and_holds_later_ones(srv):
    base, other = greedy(srv, n=20), greedy(srv, "other")
    set_lora(srv, model="tiny", name="style")
    adapted = greedy(srv, n=20)
    unset_lora(srv, model="tiny")
    rt = srv.service.registry.loaded["tiny"].model
    restore = slow_decode(rt, 0.05)  # ~1 s for the 20 tokens below
    rt.scheduler.auto_ngram = False  # one decode step per token: no default drafting from the pool
    got: dict = {}
    try:
        def run(key, fn):
            got[key] = fn()
            got[key + "_at"] = time.monotonic()

        first = threading.Thread(target=run, args=("first", lambda: greedy(srv, n=20)))
        started = time.monotonic()
        first.start()
        wait_until(lambda: rt.scheduler.active == 1)  # the first request is generating
        switch = threading.Thread(target=run, args=("switch", lambda: set_lora(srv, model="tiny", name="style")))
        switch.start()
        time.sleep(0.2)
        later = threading.Thread(target=run, args=("later", lambda: greedy(srv, n=20)))
        later.start()
        t0 = time.monotonic()
        assert greedy(srv, "other") == other and time.monotonic() - t0 < 0.5  # other models are not held
        for t in (first, switch, later):
            t.join(30)
    finally:
        restore()
        rt.scheduler.auto_ngram = True
        unset_lora(srv, model="tiny")
    assert got["switch"].status_code == 200
    assert got["first"] == base  # finished on the base weights, untouched mid-way
    assert got["switch_at"] - started >= 20 * 0.05 - 0.01  # the switch waited for its 20 decode steps
    assert got["later"] == adapted  # the later request waited for the switch


def test_a_reloaded_model_gets_its_adapter_back(srv):
    base = greedy(srv)
    set_lora(srv, model="tiny", name="style")
    adapted = greedy(srv)
    try:
        r = httpx.post(srv.url + "/api/generate", json={"model": "tiny", "keep_alive": 0})
        assert r.json()["done_reason"] == "unload" and "tiny" not in srv.service.registry.loaded
        assert catalog(srv)[0] == "style"
        assert greedy(srv) == adapted != base
    finally:
        unset_lora(srv, model="tiny")
    assert greedy(srv) == base
