"""The Responses API over real HTTP on the tiny fixture: every body and every stream event
validated against OpenAI's published schema (the vendored subset), each event sequence
(text, function call, reasoning, reasoning then answer, max_output_tokens, a cancelled
stream), stored responses (GET, DELETE, input_items pages, previous_response_id reusing the
KV prefix, store: false), input_tokens, and the error paths in OpenAI's envelope."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat_fixtures import THINK_TEMPLATE, generator_dir
from tests.server import serve
from tests.test_conformance_openai import check
from tests.test_http_foundation import assert_envelope

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
                          "required": ["city"], "additionalProperties": False}}
TIME = {"type": "function", "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"],
                       "additionalProperties": False}}
SCHEMAS = {t["name"]: t["parameters"] for t in (WEATHER, TIME)}
# Reasoning, the closing marker, then an answer (the thinker's prompt already opened <think>).
SPLIT = 'root ::= [a-z]{3,8} " " [a-z]{3,8} "</think>" "\\n\\n" [A-Z] [a-z]{2,6} "."'
# Text a random model cannot end early: ending needs eight z's and a full stop.
ENDLESS = 'root ::= ([a-z]{4} " ")+ "zzzzzzzz."'
RESP_ID = re.compile(r"^resp_[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")
    generator_dir(d, "thinker", n_ctx=1024, chat_template=THINK_TEMPLATE)
    with serve(models_dir=str(d), data_dir=str(tmp_path_factory.mktemp("data")), parallel=4, threads=1) as s:
        yield s


def post(srv, body, path="/v1/responses"):
    return httpx.post(srv.url + path, json=body, timeout=120)


def create(srv, **body):
    r = post(srv, {"model": "tiny", "max_output_tokens": 8, "seed": 1, **body})
    assert r.status_code == 200, r.text
    check("Response", r.json())
    return r.json()


def events(srv, **body) -> list[dict]:
    """Every event of a streamed response, each checked against the schema and its `event:` line."""
    with httpx.stream("POST", srv.url + "/v1/responses", timeout=120,
                      json={"model": "tiny", "max_output_tokens": 8, "seed": 1, **body, "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [x for x in r.iter_lines() if x]
    out = []
    for name, data in zip(lines[::2], lines[1::2]):
        assert name.startswith("event: ") and data.startswith("data: "), (name, data)
        e = json.loads(data[6:])
        assert e["type"] == name[7:]
        check("ResponseStreamEvent", e)
        out.append(e)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


def types(evs):
    return [e["type"] for e in evs]


TEXT_ITEM = ["response.output_item.added", "response.content_part.added"]
TEXT_END = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


# ---- text -------------------------------------------------------------------------------------
def test_text_response_is_a_valid_response_object_and_is_stored(srv):
    r = create(srv, input="hello world", instructions="Be brief.", metadata={"k": "v"}, max_output_tokens=6,
               grammar=ENDLESS)
    assert RESP_ID.match(r["id"]) and r["object"] == "response" and r["model"] == "tiny"
    assert r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "max_output_tokens"}
    [msg] = r["output"]
    assert msg["type"] == "message" and msg["role"] == "assistant" and msg["status"] == "incomplete"
    assert msg["content"][0]["type"] == "output_text" and msg["content"][0]["text"]
    u = r["usage"]
    assert u["output_tokens"] == 6 and u["input_tokens"] > 5 and u["total_tokens"] == u["input_tokens"] + 6
    assert u["output_tokens_details"] == {"reasoning_tokens": 0} and "cached_tokens" in u["input_tokens_details"]
    assert r["instructions"] == "Be brief." and r["metadata"] == {"k": "v"} and r["store"] is True
    got = httpx.get(f"{srv.url}/v1/responses/{r['id']}")
    assert got.status_code == 200 and got.json() == r
    check("Response", got.json())


def test_a_response_that_ends_on_its_own_is_completed(srv):
    # A grammar that ends: the model must stop after it (the fixture's own EOS is random).
    r = create(srv, input="hi", grammar='root ::= "Hello there."', max_output_tokens=40)
    assert r["status"] == "completed" and r["incomplete_details"] is None and r["completed_at"] >= r["created_at"]
    assert r["output"][0]["content"][0]["text"] == "Hello there." and r["output"][0]["status"] == "completed"


def test_text_stream_emits_the_documented_events_in_order(srv):
    evs = events(srv, input="hello", grammar='root ::= "Hello there."', max_output_tokens=40)
    t = types(evs)
    n = t.count("response.output_text.delta")
    assert n >= 1
    assert t == (["response.created", "response.in_progress"] + TEXT_ITEM + ["response.output_text.delta"] * n
                 + TEXT_END + ["response.completed"])
    assert evs[0]["response"]["status"] == "in_progress" and evs[0]["response"]["output"] == []
    text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
    assert text == "Hello there." == evs[-4]["text"]
    final = evs[-1]["response"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == text
    assert final["output"][0]["id"] == evs[2]["item"]["id"] == evs[-2]["item"]["id"]
    assert httpx.get(f"{srv.url}/v1/responses/{final['id']}").json() == final  # stored before the last event


def test_max_output_tokens_ends_the_stream_with_response_incomplete(srv):
    evs = events(srv, input="hello", max_output_tokens=5, grammar=ENDLESS)
    assert types(evs)[-1] == "response.incomplete"
    final = evs[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"]["reason"] == "max_output_tokens"
    assert final["usage"]["output_tokens"] == 5


def test_json_schema_text_format_is_enforced(srv):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    r = create(srv, input="a number", max_output_tokens=60,
               text={"format": {"type": "json_schema", "name": "num", "schema": schema, "strict": True}})
    assert r["status"] == "completed" and r["text"]["format"]["type"] == "json_schema"
    jsonschema.validate(json.loads(r["output"][0]["content"][0]["text"]), schema)
    obj = create(srv, input="json please", max_output_tokens=200, text={"format": {"type": "json_object"}})
    if obj["status"] == "completed":  # a random model may fill 200 tokens before closing its object
        assert isinstance(json.loads(obj["output"][0]["content"][0]["text"]), dict)


# ---- function calls ---------------------------------------------------------------------------------
def check_call(item, names=SCHEMAS):
    assert item["type"] == "function_call" and item["status"] == "completed"
    assert item["call_id"].startswith("call_") and item["id"].startswith("fc_")
    jsonschema.validate(json.loads(item["arguments"]), names[item["name"]])


def test_forced_function_call_is_an_output_item(srv):
    r = create(srv, input="weather in Paris?", tools=[WEATHER, TIME], tool_choice="required",
               parallel_tool_calls=False, max_output_tokens=200)
    assert r["status"] == "completed" and r["tools"][0]["name"] == "get_weather"
    [call] = r["output"]
    check_call(call)
    named = create(srv, input="time?", tools=[WEATHER, TIME], tool_choice={"type": "function", "name": "get_time"},
                   max_output_tokens=200)
    assert named["tool_choice"] == {"type": "function", "name": "get_time"}
    assert {o["name"] for o in named["output"]} == {"get_time"}
    for o in named["output"]:
        check_call(o)


def test_function_call_stream_events(srv):
    evs = events(srv, input="weather?", tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                 max_output_tokens=200)
    assert types(evs) == ["response.created", "response.in_progress", "response.output_item.added",
                          "response.function_call_arguments.delta", "response.function_call_arguments.done",
                          "response.output_item.done", "response.completed"]
    added, delta, done, item_done, final = evs[2:]
    assert added["item"]["arguments"] == "" and added["item"]["status"] == "in_progress"
    assert delta["delta"] == done["arguments"] == item_done["item"]["arguments"]
    assert done["name"] == "get_weather" and done["item_id"] == added["item"]["id"]
    check_call(item_done["item"])
    assert final["response"]["output"] == [item_done["item"]]


def test_parallel_calls_stream_one_item_each(srv):
    for seed in range(3):
        evs = events(srv, input="weather and time?", tools=[WEATHER, TIME], tool_choice="required", seed=seed,
                     max_output_tokens=400)
        t = types(evs)
        assert t[-1] == "response.completed"
        calls = evs[-1]["response"]["output"]
        assert calls and t[2:-1] == ["response.output_item.added", "response.function_call_arguments.delta",
                                     "response.function_call_arguments.done", "response.output_item.done"] * len(calls)
        assert [e["output_index"] for e in evs[2:-1]] == [i for i in range(len(calls)) for _ in range(4)]
        for c in calls:
            check_call(c)
        assert len({c["call_id"] for c in calls}) == len(calls)


def test_instructions_are_not_carried_over_by_previous_response_id(srv):
    first = create(srv, input="hello", instructions="You are a pirate who talks a lot about ships.",
                   max_output_tokens=2, grammar=ENDLESS)

    def count(**body):
        return post(srv, {"model": "tiny", "input": "more", "previous_response_id": first["id"], **body},
                    "/v1/responses/input_tokens").json()["input_tokens"]

    without, again = count(), count(instructions="You are a pirate who talks a lot about ships.")
    assert again > without + 5


def test_tool_round_trip_with_previous_response_id_reuses_the_prompt_cache(srv):
    first = create(srv, input="weather in Oslo?", tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                   max_output_tokens=200)
    [call] = first["output"]
    follow = [{"type": "function_call_output", "call_id": call["call_id"], "output": '{"temp": 3}'}]
    second = create(srv, previous_response_id=first["id"], input=follow, tools=[WEATHER],
                    grammar='root ::= "It is cold."', max_output_tokens=40)
    assert second["previous_response_id"] == first["id"] and second["status"] == "completed"
    assert second["output"][0]["content"][0]["text"] == "It is cold."
    # The conversation was not resent, yet the prompt holds it: longer than the first, and its
    # start came from the KV cache (up to the tool prompt, which differs for tool_choice required).
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
    assert second["usage"]["input_tokens_details"]["cached_tokens"] > 100
    # The same turn resent in full renders the same prompt.
    full = [{"role": "user", "content": "weather in Oslo?"},
            {"type": "function_call", "call_id": call["call_id"], "name": call["name"], "arguments": call["arguments"]},
            *follow]
    n = post(srv, {"model": "tiny", "input": full, "tools": [WEATHER]}, "/v1/responses/input_tokens").json()
    assert n == {"object": "response.input_tokens", "input_tokens": second["usage"]["input_tokens"]}
    check("TokenCountsResource", n)
    items = httpx.get(f"{srv.url}/v1/responses/{second['id']}/input_items").json()
    check("ResponseItemList", items)
    assert [i["type"] for i in items["data"]] == ["function_call_output"]


def test_previous_response_id_reuses_the_whole_previous_prompt_from_the_kv_cache(srv):
    first = create(srv, input="tell me a story", instructions="Be brief.", max_output_tokens=6, grammar=ENDLESS)
    second = create(srv, input="go on", instructions="Be brief.", previous_response_id=first["id"],
                    max_output_tokens=4, grammar=ENDLESS)
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + 6
    # The first prompt (and so all of it) was found in the cache, not computed again.
    assert second["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"]


def test_a_function_call_output_without_its_call_is_a_400(srv):
    r = post(srv, {"model": "tiny", "input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]})
    assert_envelope("openai", r, 400)


# ---- reasoning --------------------------------------------------------------------------------------
def test_reasoning_then_answer_stream(srv):
    evs = events(srv, model="thinker", input="hi", reasoning={"effort": "high"}, grammar=SPLIT, max_output_tokens=60)
    t = types(evs)
    r, a = t.count("response.reasoning_text.delta"), t.count("response.output_text.delta")
    assert r >= 1 and a >= 1
    assert t == (["response.created", "response.in_progress", "response.output_item.added",
                  "response.content_part.added"] + ["response.reasoning_text.delta"] * r
                 + ["response.reasoning_text.done", "response.content_part.done", "response.output_item.done"]
                 + TEXT_ITEM + ["response.output_text.delta"] * a + TEXT_END + ["response.completed"])
    final = evs[-1]["response"]
    rs, msg = final["output"]
    assert rs["type"] == "reasoning" and re.fullmatch(r"[a-z]{3,8} [a-z]{3,8}", rs["content"][0]["text"])
    assert rs["summary"] == [] and rs["content"][0]["type"] == "reasoning_text"
    assert re.fullmatch(r"[A-Z][a-z]{2,6}\.", msg["content"][0]["text"])
    assert final["reasoning"]["effort"] == "high"
    details = final["usage"]["output_tokens_details"]
    assert 0 < details["reasoning_tokens"] < final["usage"]["output_tokens"]


def test_reasoning_summary_events_carry_the_thinking(srv):
    evs = events(srv, model="thinker", input="hi", reasoning={"effort": "low", "summary": "auto"}, grammar=SPLIT,
                 max_output_tokens=60)
    t = types(evs)
    i = t.index("response.reasoning_summary_part.added")
    assert t[i:i + 5] == ["response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                          "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
                          "response.output_item.done"]
    rs = evs[-1]["response"]["output"][0]
    assert rs["summary"] == [{"type": "summary_text", "text": rs["content"][0]["text"]}]


def test_include_reasoning_encrypted_content_for_stateless_clients(srv):
    r = create(srv, model="thinker", input="hi", reasoning={"effort": "high"}, grammar=SPLIT, store=False,
               include=["reasoning.encrypted_content"], max_output_tokens=60)
    rs, msg = r["output"]
    assert rs["encrypted_content"] == rs["content"][0]["text"] and rs["encrypted_content"]
    again = create(srv, model="thinker", store=False, max_output_tokens=4, grammar=ENDLESS,
                   input=[{"role": "user", "content": "hi"}, rs, msg, {"role": "user", "content": "and?"}])
    # Sent back, the reasoning item is not replayed: the prompt is the one without it.
    plain = post(srv, {"model": "thinker", "input": [{"role": "user", "content": "hi"}, msg,
                                                     {"role": "user", "content": "and?"}]},
                 "/v1/responses/input_tokens").json()["input_tokens"]
    assert again["usage"]["input_tokens"] == plain


def test_reasoning_cut_by_max_output_tokens_is_all_reasoning_tokens(srv):
    r = create(srv, model="thinker", input="hi", reasoning={"effort": "medium"}, max_output_tokens=12, grammar=ENDLESS)
    assert r["status"] == "incomplete"
    assert [o["type"] for o in r["output"]] == ["reasoning"] and r["output"][0]["status"] == "incomplete"
    assert r["usage"]["output_tokens_details"]["reasoning_tokens"] >= 10  # a held-back marker prefix aside


def test_reasoning_effort_none_turns_thinking_off_and_effort_on_a_plain_template_is_accepted(srv):
    off = create(srv, model="thinker", input="hi", reasoning={"effort": "none"}, max_output_tokens=6)
    assert [o["type"] for o in off["output"]] == ["message"]
    plain = create(srv, input="hi", reasoning={"effort": "high"}, max_output_tokens=4)
    assert [o["type"] for o in plain["output"]] == ["message"]


# ---- cancellation -----------------------------------------------------------------------------------
def test_a_stopped_stream_ends_with_response_failed(srv):
    body = {"model": "tiny", "input": "go on", "max_output_tokens": 3500, "stream": True, "grammar": ENDLESS}
    for _attempt in range(5):  # under load a generation can finish before /stop reaches it: try again
        with httpx.stream("POST", srv.url + "/v1/responses", json=body, timeout=120) as r:
            lines = r.iter_lines()
            seen = []
            for x in lines:
                if x.startswith("data: "):
                    seen.append(json.loads(x[6:]))
                    if seen[-1]["type"] == "response.output_text.delta":
                        break
            stopped = httpx.post(srv.url + "/stop", json={"model": "tiny"}, timeout=30).json()["stopped"]
            seen += [json.loads(x[6:]) for x in lines if x.startswith("data: ")]
        if stopped:
            break
    else:
        pytest.fail("every generation finished before /stop")
    for e in seen:
        check("ResponseStreamEvent", e)
    assert seen[-1]["type"] == "response.failed"
    final = seen[-1]["response"]
    assert final["status"] == "cancelled" and final["error"]["code"] == "server_error"
    assert final["output"][0]["status"] == "incomplete"


def test_a_client_that_leaves_cancels_its_generation(srv):
    import time

    body = {"model": "tiny", "input": "go on", "max_output_tokens": 3500, "stream": True, "grammar": ENDLESS}
    # The server runs in this process: under load this client can be starved long enough for the
    # whole generation to finish (buffered in the socket) before it leaves; then try again.
    for _attempt in range(5):
        with httpx.stream("POST", srv.url + "/v1/responses", json=body, timeout=120) as r:
            running = list(srv.service.generation.streams)  # registered before the headers were sent
            for x in r.iter_lines():
                if '"response.output_text.delta"' in x:
                    break
        deadline = time.monotonic() + 30
        while srv.service.generation.streams and time.monotonic() < deadline:  # the state, not a fixed sleep
            time.sleep(0.02)
        assert not srv.service.generation.streams
        if len(running) == 1 and running[0].job is not None and running[0].job.cancelled:
            assert len(running[0].job.generated) < 3500  # stopped, not run to the end
            return
    pytest.fail("every generation finished before its client left")


# ---- stored responses ---------------------------------------------------------------------------------
def test_input_items_pages_as_openai(srv):
    items = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    r = create(srv, input=items, max_output_tokens=2)
    url = f"{srv.url}/v1/responses/{r['id']}/input_items"
    page = httpx.get(url, params={"limit": 2}).json()
    check("ResponseItemList", page)
    texts = [i["content"][0]["text"] for i in page["data"]]
    assert texts == ["m4", "m3"] and page["has_more"] is True  # newest first by default
    rest = httpx.get(url, params={"limit": 10, "after": page["last_id"]}).json()
    assert [i["content"][0]["text"] for i in rest["data"]] == ["m2", "m1", "m0"] and rest["has_more"] is False
    asc = httpx.get(url, params={"order": "asc", "limit": 1}).json()
    assert asc["data"][0]["content"][0]["text"] == "m0" and asc["first_id"] == asc["last_id"]
    assert_envelope("openai", httpx.get(url, params={"after": "msg_nope"}), 400, "after")
    assert_envelope("openai", httpx.get(url, params={"limit": 0}), 400)


def test_delete_and_store_false(srv):
    r = create(srv, input="bye", max_output_tokens=2)
    url = f"{srv.url}/v1/responses/{r['id']}"
    d = httpx.delete(url)
    assert d.status_code == 200 and d.json() == {"id": r["id"], "object": "response", "deleted": True}
    for resp in (httpx.get(url), httpx.delete(url), httpx.get(url + "/input_items")):
        assert_envelope("openai", resp, 404, "not found")
    gone = create(srv, input="bye", max_output_tokens=2, store=False)
    assert gone["store"] is False
    assert_envelope("openai", httpx.get(f"{srv.url}/v1/responses/{gone['id']}"), 404)
    assert_envelope("openai", post(srv, {"model": "tiny", "input": "x", "previous_response_id": gone["id"]}), 404,
                    "Previous response")


def test_cancel_is_only_for_background_responses(srv):
    r = create(srv, input="x", max_output_tokens=1)
    assert_envelope("openai", httpx.post(f"{srv.url}/v1/responses/{r['id']}/cancel"), 400, "background")
    assert_envelope("openai", httpx.post(f"{srv.url}/v1/responses/resp_{'0' * 32}/cancel"), 404)


# ---- errors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].type"),
    ({"background": True}, "background"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"reasoning": {"summary": "long"}}, "reasoning.summary"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]}, "input[0].content"),
    ({"input": []}, "input"),
    ({"tool_choice": {"type": "allowed_tools", "tools": []}}, "tool_choice"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"truncation": "auto"}, "truncation"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"top_logprobs": 3}, "top_logprobs"),
])
def test_bad_requests_are_400_in_openais_envelope(srv, body, param):
    r = post(srv, {"model": "tiny", "input": "hi", **body})
    err = assert_envelope("openai", r, 400)["error"]
    assert err["type"] == "invalid_request_error" and (err["param"] or "").startswith(param.split("[")[0]), err


def test_unknown_model_and_ids_and_bad_json(srv):
    r = post(srv, {"model": "nope", "input": "hi"})
    assert_envelope("openai", r, 404)
    assert r.json()["error"]["code"] == "model_not_found"
    for rid in ("resp_" + "0" * 32, "../../etc/passwd", "x" * 5000):
        assert_envelope("openai", httpx.get(f"{srv.url}/v1/responses/{rid}"), 404)
    bad = httpx.post(srv.url + "/v1/responses", content=b"{not json", headers={"content-type": "application/json"})
    assert_envelope("openai", bad, 400)
    assert_envelope("openai", post(srv, {"model": "tiny", "input": 5}), 400)
    assert_envelope("openai", post(srv, {"model": "tiny", "input": "hi", "tools": [WEATHER],
                                         "tool_choice": {"type": "function", "name": "other"}}), 400)
    assert_envelope("openai", post(srv, {"model": "tiny", "input": "hi", "reasoning": {"effort": "high"},
                                         "stream": True, "grammar": "root ::= ("}), 400)


def test_an_image_for_a_model_without_vision_is_a_400(srv):
    png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
    for part in ({"type": "input_image", "image_url": png}, {"type": "input_image", "file_id": "file-" + "0" * 24}):
        r = post(srv, {"model": "tiny", "input": [{"role": "user", "content": [{"type": "input_text", "text": "what?"},
                                                                              part]}]})
        assert_envelope("openai", r, 400, "cannot read images")
    assert_envelope("openai", post(srv, {"model": "tiny", "input": [{"role": "user", "content": [
        {"type": "input_image"}]}]}), 400, "image_url or file_id")


def test_input_tokens_counts_what_create_would_prefill(srv):
    body = {"model": "tiny", "input": [{"role": "user", "content": [{"type": "input_text", "text": "count me"}]}],
            "instructions": "sys", "tools": [WEATHER]}
    n = post(srv, body, "/v1/responses/input_tokens").json()["input_tokens"]
    r = create(srv, **{k: v for k, v in body.items() if k != "model"}, max_output_tokens=1)
    assert n == r["usage"]["input_tokens"] and n > 10
    assert_envelope("openai", post(srv, {"model": "tiny", "input": "x", "previous_response_id": "resp_x"},
                                   "/v1/responses/input_tokens"), 404)


# ---- never a 500 ------------------------------------------------------------------------------------
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=6),
                    st.sampled_from(["message", "function_call", "function_call_output", "reasoning", "user",
                                     "assistant", "input_text", "input_image", "output_text", "call_1", "{}"]))
_json = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(
    st.sampled_from(["type", "role", "content", "text", "call_id", "name", "arguments", "output", "image_url",
                     "file_id", "id"]), c, max_size=4)), max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inp=_json, extra=st.dictionaries(st.sampled_from(["tools", "tool_choice", "text", "reasoning", "include",
                                                         "instructions", "metadata", "previous_response_id"]),
                                        _json, max_size=2))
def test_arbitrary_input_is_answered_never_a_500(srv, inp, extra):
    r = post(srv, {"model": "tiny", "input": inp, "max_output_tokens": 1, **extra})
    assert r.status_code in (200, 400, 404), r.text
    if r.status_code == 200:
        check("Response", r.json())
    else:
        assert_envelope("openai", r, r.status_code)
