"""Tools and structured output on the real gemma-3-270m default, where they show something
real: a schema-constrained answer that validates and is right, and a forced tool call whose
argument comes from the question. Greedy, few tokens."""

import json

import httpx
import jsonschema
import ollama
import openai
import pytest


pytestmark = pytest.mark.slow

MODEL = "gemma-3-270m"
CAPITAL = {"type": "object", "properties": {"country": {"type": "string", "maxLength": 20},
                                            "capital": {"type": "string", "maxLength": 20}},
           "required": ["country", "capital"], "additionalProperties": False}
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                   "required": ["city"], "additionalProperties": False}}}]
ASK_CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
ASK_WEATHER = [{"role": "user", "content": "What's the weather like in Paris today?"}]


@pytest.fixture
def srv(gemma_srv):
    return gemma_srv


def test_json_schema_answer_validates_and_is_right(srv):
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    r = oai.chat.completions.create(model=MODEL, messages=ASK_CAPITAL, temperature=0, max_tokens=40,
                                    response_format={"type": "json_schema",
                                                     "json_schema": {"name": "capital", "schema": CAPITAL, "strict": True}})
    assert r.choices[0].finish_reason == "stop"
    answer = json.loads(r.choices[0].message.content)
    jsonschema.validate(answer, CAPITAL)
    assert answer["capital"] == "Paris"
    o = ollama.Client(host=srv.url).chat(model=MODEL, messages=ASK_CAPITAL, format=CAPITAL,
                                         options={"temperature": 0, "num_predict": 40})
    assert json.loads(o.message.content)["capital"] == "Paris"


def test_forced_tool_call_takes_its_argument_from_the_question(srv):
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    r = oai.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=WEATHER, tool_choice="required",
                                    parallel_tool_calls=False, temperature=0, max_tokens=40)
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=WEATHER, stream=True,
                                              tool_choice="required", parallel_tool_calls=False, temperature=0,
                                              max_tokens=40))
    streamed = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(t.function.name, t.function.arguments) for t in streamed] == [("get_weather", call.function.arguments)]
    o = httpx.post(srv.url + "/api/chat", json={"model": MODEL, "messages": ASK_WEATHER, "tools": WEATHER,
                                                "tool_choice": "required", "stream": False,
                                                "options": {"temperature": 0, "num_predict": 40}}, timeout=120).json()
    assert o["message"]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
