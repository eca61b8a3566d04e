"""Reasoning budgets on the tiny fixture with a template that can think (THINK_TEMPLATE: the
generation prompt opens <think>, and the random model never closes it by itself). At the
budget the engine writes </think> itself and the answer goes on, on every face: OpenAI chat
`reasoning_effort` / `reasoning_budget`, Antfly's chat, Ollama `think` levels, Anthropic
`thinking.budget_tokens`, and the server's --reasoning-budget.

"Exactly the budget": with greedy sampling, the reasoning of a budgeted run is the same text
as the first N tokens of an unbudgeted run (max_tokens N), and the engine's own count
(usage reasoning_tokens) is N; the answer after the forced marker is not empty."""

import json
import re

import anthropic
import httpx
import ollama
import pytest

from inferd.chat.reasoning import EFFORT_BUDGETS, effort_budget, thinking_budget
from inferd.errors import InvalidInput
from inferd.scheduling.thinking import ThinkingBudget
from tests.chat_fixtures import HI, THINK_TEMPLATE, generator_dir
from tests.server import serve
from tests.test_http_foundation import assert_envelope

GREEDY = {"temperature": 0, "top_p": 1.0}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "thinker", n_ctx=2048, chat_template=THINK_TEMPLATE)
    generator_dir(d, "tiny", n_ctx=512)  # ChatML: cannot think
    with serve(models_dir=str(d), parallel=4, threads=1) as s:
        yield s


def post(srv, path, body):
    r = httpx.post(srv.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def reference(srv, n):
    """The first n thinking tokens' text, with no budget: the model is cut by max_tokens."""
    msg = post(srv, "/v1/chat/completions", {"model": "thinker", "messages": HI, "enable_thinking": True,
                                             "max_tokens": n, **GREEDY})["choices"][0]["message"]
    assert msg["content"] == ""  # all of it was thinking
    return msg["reasoning_content"]


# ---- pure -----------------------------------------------------------------------------------
def test_effort_levels_map_to_documented_budgets():
    assert EFFORT_BUDGETS == {"none": 0, "minimal": 256, "low": 1024, "medium": 4096, "high": None}
    assert effort_budget("low") == 1024
    with pytest.raises(InvalidInput, match="reasoning_effort must be one of none, minimal"):
        effort_budget("extreme")
    assert thinking_budget(7, "low", 100) == 7          # the request's tokens win
    assert thinking_budget(None, "minimal", 100) == 256  # then its effort
    assert thinking_budget(None, None, 100) == 100       # then the server's default
    assert thinking_budget(None, None, -1) is None       # -1: unbounded


def test_budget_tracker_counts_inside_the_block_and_closes_it():
    t = ThinkingBudget(b"<think>", b"</think>", [5, 6], budget=2)
    for piece in (b" ", b"<thi", b"nk>"):
        t.feed(piece)
        assert not t.due()
    t.feed(b"a")
    assert not t.due() and t.count == 1
    t.feed(b"b")
    assert t.due() and t.close() == [5, 6] and not t.due()
    t.feed(b"</think", forced=True)
    t.feed(b">", forced=True)
    assert t.state == "done" and t.count == 2 and not t.bounding
    plain = ThinkingBudget(b"<think>", b"</think>", [], budget=0)
    plain.feed(b"Hello")
    assert plain.state == "done" and not plain.due()  # no block at the start: nothing to bound
    opened = ThinkingBudget(b"<think>", b"</think>", [9], budget=0, in_block=True)
    assert opened.due()  # the prompt opened the block and nothing is allowed


# ---- every face -----------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/ai/v1/chat/completions"])
def test_openai_and_antfly_chat_close_thinking_at_the_budget(srv, path):
    n = 9
    ref = reference(srv, n)
    body = {"model": "thinker", "messages": HI, "enable_thinking": True, "reasoning_budget": n, "max_tokens": n + 25,
            **GREEDY}
    r = post(srv, path, body)
    msg, usage = r["choices"][0]["message"], r["usage"]
    assert msg["reasoning_content"] == ref
    assert usage["completion_tokens_details"]["reasoning_tokens"] == n
    assert msg["content"] and "think>" not in msg["content"]  # the answer goes on after the forced marker
    assert usage["completion_tokens"] == n + 25 and r["choices"][0]["finish_reason"] == "length"
    with httpx.stream("POST", srv.url + path, json={**body, "stream": True}, timeout=60) as s:
        frames = [json.loads(x[6:]) for x in s.iter_lines() if x.startswith("data: {")]
    deltas = [f["choices"][0]["delta"] for f in frames if f["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == ref
    assert "".join(d.get("content", "") for d in deltas) == msg["content"]


def test_openai_reasoning_effort(srv):
    ref = reference(srv, 256)
    body = {"model": "thinker", "messages": HI, "reasoning_effort": "minimal", "enable_thinking": True,
            "max_tokens": 300, **GREEDY}
    r = post(srv, "/v1/chat/completions", body)
    assert r["choices"][0]["message"]["reasoning_content"] == ref
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 256
    assert r["choices"][0]["message"]["content"]
    # "none": thinking off (the template closes an empty block), nothing counted as reasoning
    off = post(srv, "/v1/chat/completions", {"model": "thinker", "messages": HI, "reasoning_effort": "none",
                                             "max_tokens": 5, **GREEDY})
    assert "reasoning_content" not in off["choices"][0]["message"]
    assert off["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    bad = httpx.post(srv.url + "/v1/chat/completions", json={**body, "reasoning_effort": "extreme"})
    assert assert_envelope("openai", bad, 400, "reasoning_effort must be one of")["error"]["param"] == "reasoning_effort"
    assert_envelope("openai", httpx.post(srv.url + "/v1/chat/completions", json={**body, "reasoning_budget": -2}),
                    400, "reasoning_budget")
    # an effort bounds thinking but does not ask for it: a model that cannot think just answers
    assert post(srv, "/v1/chat/completions", {"model": "tiny", "messages": HI, "reasoning_effort": "low",
                                              "max_tokens": 3, **GREEDY})["usage"]["completion_tokens"] == 3


def test_ollama_think_level_is_the_effort_budget(srv):
    ref = reference(srv, 1024)
    cl = ollama.Client(host=srv.url)
    opts = {"temperature": 0, "top_k": 0, "top_p": 1.0, "repeat_penalty": 1.0, "num_predict": 1050}
    r = cl.chat(model="thinker", messages=HI, think="low", options=opts)
    assert r.message.thinking == ref and r.message.content and r.eval_count == 1050
    parts = list(cl.chat(model="thinker", messages=HI, think="low", options=opts, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == ref
    assert "".join(p.message.content for p in parts) == r.message.content
    with pytest.raises(ollama.ResponseError) as e:
        cl.chat(model="thinker", messages=HI, think="extreme")
    assert e.value.status_code == 400


def test_anthropic_thinking_budget_tokens(srv):
    n = 12
    ref = reference(srv, n)
    c = anthropic.Anthropic(base_url=srv.url, api_key="none", max_retries=0)
    m = c.messages.create(model="thinker", max_tokens=n + 20, messages=HI, extra_body=GREEDY,
                          thinking={"type": "enabled", "budget_tokens": n})
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == ref and m.content[1].text and "think>" not in m.content[1].text
    assert m.usage.output_tokens_details.thinking_tokens == n and m.usage.output_tokens == n + 20
    assert m.stop_reason == "max_tokens"
    with c.messages.stream(model="thinker", max_tokens=n + 20, messages=HI, extra_body=GREEDY,
                           thinking={"type": "enabled", "budget_tokens": n}) as s:
        thought = "".join(e.thinking for e in s if e.type == "thinking")
        final = s.get_final_message()
    assert thought == ref and final.content[1].text == m.content[1].text


def test_a_grammar_takes_the_forced_marker_and_shapes_the_answer(srv):
    grammar = 'root ::= [a-z ]{1,300} "</think>" "\\n\\n" [A-Z] [a-z]{2,6} "."'
    body = {"model": "thinker", "messages": HI, "enable_thinking": True, "reasoning_budget": 6, "grammar": grammar,
            "max_tokens": 80, "seed": 3}
    r = post(srv, "/v1/chat/completions", body)
    msg = r["choices"][0]["message"]
    assert re.fullmatch(r"[a-z ]+", msg["reasoning_content"]) and re.fullmatch(r"[A-Z][a-z]{2,6}\.", msg["content"])
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 6
    assert r["choices"][0]["finish_reason"] == "stop"
    # a grammar with no way to close the block refuses the marker: the budget ends the sequence
    r = post(srv, "/v1/chat/completions", {**body, "grammar": "root ::= [a-z]{20,40}", "reasoning_budget": 3})
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 3


def test_server_default_budget(tmp_path):
    generator_dir(tmp_path, "thinker", n_ctx=512, chat_template=THINK_TEMPLATE)
    with serve(models_dir=str(tmp_path), parallel=2, threads=1, reasoning_budget=5) as s:
        ref = httpx.post(s.url + "/v1/chat/completions", json={
            "model": "thinker", "messages": HI, "enable_thinking": True, "max_tokens": 5, "reasoning_budget": 400,
            **GREEDY}).json()["choices"][0]["message"]["reasoning_content"]
        body = {"model": "thinker", "messages": HI, "enable_thinking": True, "max_tokens": 30, **GREEDY}
        r = httpx.post(s.url + "/v1/chat/completions", json=body).json()
        assert r["choices"][0]["message"]["reasoning_content"] == ref
        assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5
        own = httpx.post(s.url + "/v1/chat/completions", json={**body, "reasoning_budget": 8}).json()
        assert own["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8  # the request's own wins
        o = ollama.Client(host=s.url).chat(model="thinker", messages=HI, think=True,
                                           options={"temperature": 0, "num_predict": 30})
        assert o.message.thinking == ref and o.message.content


def test_budget_with_speculation_and_several_choices(srv):
    n = 7
    ref = reference(srv, n)
    base = {"model": "thinker", "messages": HI, "enable_thinking": True, "reasoning_budget": n, "max_tokens": n + 15,
            **GREEDY}
    # an n-gram drafter never drafts past the budget: the block ends at exactly n tokens
    spec = post(srv, "/ai/v1/chat/completions", {**base, "max_tokens": 200, "draft_model": "ngram",
                                                 "speculation_policy": "on"})
    assert spec["choices"][0]["message"]["reasoning_content"] == ref
    assert spec["usage"]["completion_tokens_details"]["reasoning_tokens"] == n
    assert spec["speculation"]["drafted_tokens"] > 0  # it drafted, in the answer after the block
    # n = 2: each choice has its own count; usage adds them up
    two = post(srv, "/v1/chat/completions", {**base, "n": 2})
    assert [c["message"]["reasoning_content"] for c in two["choices"]] == [ref, ref]
    assert two["usage"]["completion_tokens_details"]["reasoning_tokens"] == 2 * n
