"""llama-server's helper routes and stream extensions over real HTTP on the tiny fixture:
GET/POST /props, POST /apply-template, /slots?fail_on_no_slot=1, return_progress
(prompt_progress frames) and the `: keep-alive` SSE comments of a silent stream."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.chat_fixtures import generator_dir
from tests.server import serve
from tests.test_http_foundation import assert_envelope
from tests.test_lora_http import slow_decode

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny", n_ctx=256, loras={"style": "file"})
    generator_dir(d, "other", n_ctx=128)
    with serve(models_dir=str(d), parallel=2, threads=1) as s:
        yield s


def test_props(srv):
    r = httpx.get(srv.url + "/props", params={"model": "tiny"}, timeout=60)
    assert r.status_code == 200, r.text
    p = r.json()
    assert p["total_slots"] == 2 and p["default_generation_settings"]["n_ctx"] == 256
    assert p["chat_template"] == CHATML and p["modalities"] == {"vision": False, "audio": False}
    assert p["model_path"].endswith("generators/tiny/model.gguf") and p["model_alias"] == "tiny"
    assert p["build_info"].startswith("inferd ") and "llama-cpp-python" in p["build_info"]
    params = p["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["top_p"], params["n_predict"]) == (0.8, 40, 0.95, -1)
    assert params["lora"] == [{"id": 0, "scale": 0.0}] and p["is_sleeping"] is False
    assert httpx.get(srv.url + "/props?model=other", timeout=60).json()["default_generation_settings"]["n_ctx"] == 128
    assert_envelope("openai", httpx.get(srv.url + "/props"), 400, "'model' is required")
    assert_envelope("openai", httpx.get(srv.url + "/props?model=ghost"), 404, "ghost")


def test_post_props_changes_nothing_and_refuses_what_it_cannot(srv):
    r = httpx.post(srv.url + "/props?model=tiny", json={})
    assert r.status_code == 200 and r.json() == {"success": True}
    assert_envelope("openai", httpx.post(srv.url + "/props?model=tiny", json={"n_ctx": 8}), 400, "'n_ctx'")
    assert_envelope("openai", httpx.post(srv.url + "/props?model=tiny", json=[1]), 400, None)


def test_apply_template(srv):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = httpx.post(srv.url + "/apply-template", json={"model": "tiny", "messages": msgs}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json() == {"prompt": "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                  "<|im_start|>assistant\n"}
    # what a chat request tokenizes: the same number of prompt tokens
    chat = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny", "messages": msgs, "max_tokens": 1},
                      timeout=60).json()
    tok = httpx.post(srv.url + "/tokenize", json={"model": "tiny", "content": r.json()["prompt"],
                                                  "add_special": True}).json()["tokens"]
    assert chat["usage"]["prompt_tokens"] == len(tok)
    assert_envelope("openai", httpx.post(srv.url + "/apply-template", json={"model": "tiny", "messages": []}), 400,
                    "at least one message")
    assert_envelope("openai", httpx.post(srv.url + "/apply-template", json={"model": "tiny"}), 400, "'messages'")
    bad = {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}
    assert_envelope("openai", httpx.post(srv.url + "/apply-template", json=bad), 400, "role")


def sse_lines(srv, path, body):
    with httpx.stream("POST", srv.url + path, json=body, timeout=60) as r:
        assert r.status_code == 200
        return [line for line in r.iter_lines() if line]


def progress_frames(lines):
    return [json.loads(x[6:])["prompt_progress"] for x in lines
            if x.startswith("data: {") and "prompt_progress" in json.loads(x[6:])]


def test_return_progress(srv):
    body = {"model": "tiny", "prompt": "hello world " * 20, "max_tokens": 3, "temperature": 0, "stream": True,
            "return_progress": True}
    first = sse_lines(srv, "/v1/completions", body)
    prog = progress_frames(first)
    n = httpx.post(srv.url + "/tokenize", json={"model": "tiny", "content": body["prompt"], "add_special": True}
                   ).json()["tokens"]
    assert prog[-1]["total"] == prog[-1]["processed"] == len(n)
    assert prog[0]["cache"] <= 1  # at most the BOS an earlier request left in a slot
    assert all(p["time_ms"] >= 0 for p in prog)
    assert first.index(next(x for x in first if "prompt_progress" in x)) < first.index(
        next(x for x in first if '"text":"' in x and '"text":""' not in x))  # before the first token
    again = progress_frames(sse_lines(srv, "/v1/completions", body))
    assert again[-1]["cache"] == len(n) - 1 and again[-1]["processed"] == len(n)  # the prefix was reused
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True,
            "return_progress": True}
    assert progress_frames(sse_lines(srv, "/v1/chat/completions", chat))[-1]["total"] > 0
    no = sse_lines(srv, "/v1/completions", {**body, "return_progress": False})
    assert progress_frames(no) == []


def test_keep_alive_comments_while_the_prompt_is_processed(srv):
    handle_ready = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1})
    assert handle_ready.status_code == 200
    restore = slow_decode(srv.service.registry.loaded["tiny"].model, 0.8)
    try:
        body = {"model": "tiny", "prompt": "hello", "max_tokens": 2, "stream": True, "sse_ping_interval": 0.2}
        lines = sse_lines(srv, "/v1/completions", body)
        quiet = sse_lines(srv, "/v1/completions", {**body, "sse_ping_interval": -1})
        chat = sse_lines(srv, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                                       "max_tokens": 2, "stream": True, "sse_ping_interval": 0.2})
    finally:
        restore()
    # chat: the role chunk opens the stream at once; the pings go on until the first token
    role = next(i for i, x in enumerate(chat) if '"role":"assistant"' in x)
    after = next(i for i, x in enumerate(chat) if i > role and x.startswith("data: "))  # a token, or the end
    assert chat[role + 1:after].count(": keep-alive") >= 2
    first_data = next(i for i, x in enumerate(lines) if x.startswith("data: "))
    assert lines[:first_data].count(": keep-alive") >= 2 and lines[-1] == "data: [DONE]"
    assert ": keep-alive" not in quiet


def test_fail_on_no_slot(srv):
    httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1})
    assert httpx.get(srv.url + "/slots?model=tiny&fail_on_no_slot=1").status_code == 200
    handle = srv.service.registry.loaded["tiny"].model
    restore = slow_decode(handle, 0.05)
    threads = [threading.Thread(target=httpx.post, args=(srv.url + "/v1/completions",),
                                kwargs={"json": {"model": "tiny", "prompt": "hello", "max_tokens": 30,
                                                 "temperature": 0, "ignore_eos": True}, "timeout": 60})
               for _ in range(2)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while handle.scheduler.active < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        r = httpx.get(srv.url + "/slots?model=tiny&fail_on_no_slot=1")
        assert_envelope("openai", r, 503, "no slot available")
        assert httpx.get(srv.url + "/slots?model=tiny").status_code == 200  # without the flag: the view
    finally:
        for t in threads:
            t.join(60)
        restore()
    assert httpx.get(srv.url + "/slots?model=tiny&fail_on_no_slot=1").status_code == 200
