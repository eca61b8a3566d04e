"""Reasoning over real HTTP on the tiny fixture: `enable_thinking` (top level or in
chat_template_kwargs) and Ollama `think` reach a template that can think (a manifest
override, or a per-request chat_template, whose generation prompt opens `<think>`); the
output is split into reasoning_content / thinking and content, streamed and not; empty
reasoning is omitted; incoming reasoning is not replayed; asking a template that cannot
think to think is a 400. A raw grammar makes the random model write the closing marker."""

import json
import re

import httpx
import ollama
import openai
import pytest

from tests.chat_fixtures import HI, THINK_TEMPLATE, generator_dir
from tests.server import serve
from tests.test_http_foundation import assert_envelope

# Reasoning, the closing marker, then an answer (the prompt already opened <think>).
SPLIT = 'root ::= [a-z]{3,8} " " [a-z]{3,8} "</think>" "\\n\\n" [A-Z] [a-z]{2,6} "."'
REASONING, ANSWER = re.compile(r"[a-z]{3,8} [a-z]{3,8}"), re.compile(r"[A-Z][a-z]{2,6}\.")
CHAT_ROUTES = ["/v1/chat/completions", "/chat/completions", "/ai/v1/generate", "/ai/v1/chat/completions"]
# A template that would print reasoning fields of earlier turns, if any reached it.
SHOWS = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{{ m.get('reasoning_content', '') }}"
         "{{ m.get('thinking', '') }}{{ m.get('reasoning', '') }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny", n_ctx=512)  # ChatML: cannot think
    generator_dir(d, "thinker", n_ctx=512, chat_template=THINK_TEMPLATE)
    generator_dir(d, "shows", n_ctx=512, chat_template=SHOWS)
    with serve(models_dir=str(d), parallel=4, threads=1) as s:
        yield s


def post(srv, path, body):
    return httpx.post(srv.url + path, json=body, timeout=60)


def message(srv, path, body):
    r = post(srv, path, body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]


def stream_deltas(srv, path, body):
    with httpx.stream("POST", srv.url + path, json={**body, "stream": True}, timeout=60) as r:
        frames = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    return [f["choices"][0]["delta"] for f in frames if f["choices"]]


def test_enable_thinking_splits_reasoning_from_the_answer_on_every_face(srv):
    asks = [{"enable_thinking": True}, {"chat_template_kwargs": {"enable_thinking": True}},
            {"enable_thinking": True, "chat_template_kwargs": {"enable_thinking": False}}]  # the top level wins
    for i, path in enumerate(CHAT_ROUTES):
        body = {"model": "thinker", "messages": HI, "grammar": SPLIT, "seed": i, "max_tokens": 60, **asks[i % 3]}
        msg = message(srv, path, body)
        assert REASONING.fullmatch(msg["reasoning_content"]) and ANSWER.fullmatch(msg["content"]), msg
        deltas = stream_deltas(srv, path, body)
        assert "".join(d.get("reasoning_content", "") for d in deltas) == msg["reasoning_content"]
        assert "".join(d.get("content", "") for d in deltas) == msg["content"]
        assert not any("think>" in d.get("content", "") + d.get("reasoning_content", "") for d in deltas)


def test_openai_client_reads_reasoning_with_a_per_request_template(srv):
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    # the plain model, given a thinking template in the request
    r = oai.chat.completions.create(model="tiny", messages=HI, max_tokens=60, seed=3,
                                    extra_body={"chat_template": THINK_TEMPLATE, "enable_thinking": True,
                                                "grammar": SPLIT})
    msg = r.choices[0].message
    assert REASONING.fullmatch(msg.model_extra["reasoning_content"]) and ANSWER.fullmatch(msg.content)
    assert r.choices[0].finish_reason == "stop"


def test_a_model_that_thinks_unasked_and_thinking_turned_off(srv):
    own = 'root ::= "<think>" [a-z]{3,6} "</think>" [a-z]{3,6}'
    # not asked: the template's default; a block the model opens itself is still split off
    msg = message(srv, "/v1/chat/completions", {"model": "thinker", "messages": HI, "grammar": own, "max_tokens": 40})
    assert re.fullmatch(r"[a-z]{3,6}", msg["reasoning_content"]) and re.fullmatch(r"[a-z]{3,6}", msg["content"])
    # turned off (the template closes an empty block): a model that thinks anyway has it dropped
    body = {"model": "thinker", "messages": HI, "grammar": own, "max_tokens": 40, "enable_thinking": False}
    msg = message(srv, "/v1/chat/completions", body)
    assert "reasoning_content" not in msg and re.fullmatch(r"[a-z]{3,6}", msg["content"])
    assert not any("reasoning_content" in d for d in stream_deltas(srv, "/v1/chat/completions", body))


def test_empty_reasoning_is_omitted(srv):
    body = {"model": "thinker", "messages": HI, "enable_thinking": True, "grammar": 'root ::= "</think>" [a-z]{3,6}',
            "max_tokens": 40}
    msg = message(srv, "/v1/chat/completions", body)
    assert "reasoning_content" not in msg and re.fullmatch(r"[a-z]{3,6}", msg["content"])
    assert not any("reasoning_content" in d for d in stream_deltas(srv, "/v1/chat/completions", body))
    o = post(srv, "/api/chat", {"model": "tiny", "messages": HI, "stream": False, "options": {"num_predict": 3}}).json()
    assert "thinking" not in o["message"]


def test_ollama_think_on_chat_and_generate(srv):
    cl = ollama.Client(host=srv.url)
    greedy = {"temperature": 0, "top_k": 0, "top_p": 1.0, "repeat_penalty": 1.0, "num_predict": 12}
    r = cl.chat(model="thinker", messages=HI, think=True, options=greedy)
    # The prompt opened <think> and the random model never closes it: all of it is thinking,
    # exactly what the OpenAI face calls reasoning_content for the same greedy tokens.
    assert r.message.thinking and r.message.content == "" and r.eval_count == 12
    same = message(srv, "/v1/chat/completions", {"model": "thinker", "messages": HI, "enable_thinking": True,
                                                 "temperature": 0, "max_tokens": 12})
    assert same["reasoning_content"] == r.message.thinking and same["content"] == ""
    parts = list(cl.chat(model="thinker", messages=HI, think=True, options=greedy, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == r.message.thinking
    assert not "".join(p.message.content for p in parts)
    g = cl.generate(model="thinker", prompt="hello world", think=True, options=greedy)
    assert g.thinking == r.message.thinking and g.response == ""
    lines = [json.loads(x) for x in httpx.post(srv.url + "/api/generate", json={
        "model": "thinker", "prompt": "hello world", "think": True, "options": greedy}).text.splitlines()]
    assert "".join(x.get("thinking", "") for x in lines) == g.thinking
    # think: false renders the closed empty block; nothing is thinking
    off = cl.chat(model="thinker", messages=HI, think=False, options=greedy)
    assert off.message.thinking is None and off.message.content


def test_thinking_asked_of_a_template_that_cannot_think_is_a_400(srv):
    for path in CHAT_ROUTES:
        fam = "antfly" if path.startswith("/ai") else "openai"
        for ask in ({"enable_thinking": True}, {"chat_template_kwargs": {"enable_thinking": True}}):
            r = post(srv, path, {"model": "tiny", "messages": HI, **ask})
            body = assert_envelope(fam, r, 400, "chat template does not support thinking")
            if fam == "openai":
                assert body["error"]["param"] == "enable_thinking"
        assert post(srv, path, {"model": "tiny", "messages": HI, "enable_thinking": False, "max_tokens": 2}
                    ).status_code == 200
        assert_envelope(fam, post(srv, path, {"model": "thinker", "messages": HI,
                                              "chat_template_kwargs": {"enable_thinking": "yes"}}), 400,
                        "must be a boolean")
    for path, extra in [("/api/chat", {"messages": HI}), ("/api/generate", {"prompt": "x"})]:
        assert_envelope("ollama", post(srv, path, {"model": "tiny", "think": True, "stream": False, **extra}),
                        400, "remove 'think'")
    with pytest.raises(openai.BadRequestError, match="does not support thinking"):
        openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0).chat.completions.create(
            model="tiny", messages=HI, extra_body={"enable_thinking": True})
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=srv.url).chat(model="tiny", messages=HI, think=True)
    assert e.value.status_code == 400


def test_incoming_reasoning_is_not_replayed(srv):
    clean = [HI[0], {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Again?"}]
    noisy = [HI[0], {"role": "assistant", "content": "Hi.", "reasoning_content": "secret plan", "thinking": "more",
                     "reasoning": "even more"}, {"role": "user", "content": "Again?"}]

    def n_prompt(path, msgs, extra):
        r = post(srv, path, {"model": "shows", "messages": msgs, **extra})
        assert r.status_code == 200, r.text
        j = r.json()
        return j["prompt_eval_count"] if path == "/api/chat" else j["usage"]["prompt_tokens"]

    for path, extra in [("/v1/chat/completions", {"max_tokens": 1}), ("/ai/v1/generate", {"max_tokens": 1}),
                        ("/api/chat", {"stream": False, "options": {"num_predict": 1}})]:
        assert n_prompt(path, noisy, extra) == n_prompt(path, clean, extra)
