"""plan_chat end to end on the fixture model, the way the engine will use it: validate the
request, render the prompt with the model's own template, sample under the plan's grammar,
and parse the output streamed and at once."""

import json

import jinja2
import jsonschema
import pytest
from llama_cpp import Llama, LlamaGrammar

from inferd.chat.plan import plan_chat
from inferd.chat.reasoning import requested_thinking
from inferd.errors import InvalidInput
from tests.conftest import FIXTURES

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "roll", "parameters": {
        "type": "object", "properties": {"sides": {"type": "integer", "minimum": 2, "maximum": 20}},
        "required": ["sides"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
HISTORY = [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "call_a", "content": "-3C, snow"},
    {"role": "user", "content": "Now roll a die."},
]


@pytest.fixture(scope="module")
def llm():
    # The Hermes tool prompt is longer than the fixture's 256 training positions; a random
    # model does not care, and the grammar is what is under test.
    return Llama(str(FIXTURES / "gguf" / "tiny-llama.gguf"), n_ctx=1024, n_threads=1, verbose=False, seed=0)


def render(template, plan):
    return jinja2.Environment().from_string(template).render(messages=plan.messages, add_generation_prompt=True,
                                                            **plan.template_kwargs)


def run(llm, plan, template, seed, max_tokens=200):
    prompt = render(template, plan)
    gbnf = plan.grammar(prompt)
    kw = dict(temperature=1.0, seed=seed, max_tokens=max_tokens, grammar=LlamaGrammar.from_string(gbnf) if gbnf else None)
    parser = plan.output_parser(prompt)
    deltas, text, reason = [], "", None
    for chunk in llm.create_completion(prompt, stream=True, **kw):
        c = chunk["choices"][0]
        text += c["text"]
        deltas.append(parser.feed(c["text"]))
        reason = c["finish_reason"] or reason
    deltas.append(parser.finish())
    batch = plan.output_parser(prompt)
    batch.feed(text)
    batch.finish()
    return prompt, text, reason, deltas, parser.result(), batch.result()


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "roll"}}])
def test_forced_tool_calls_through_the_plan_streamed_and_batch(llm, choice):
    template = llm.metadata["tokenizer.chat_template"]
    plan = plan_chat(HISTORY, template=template, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False)
    for seed in range(10):
        prompt, text, reason, deltas, streamed, batch = run(llm, plan, template, seed)
        assert "<tools>" in prompt and '<tool_response>\n-3C, snow\n</tool_response>' in prompt
        assert reason == "stop", text
        assert streamed.content is None and batch.content is None
        assert len(streamed.tool_calls) == 1 and streamed.finish_reason(reason) == "tool_calls"
        s, b = streamed.tool_calls[0], batch.tool_calls[0]
        assert (s.name, s.arguments) == (b.name, b.arguments)
        if isinstance(choice, dict):
            assert s.name == "roll"
        jsonschema.validate(json.loads(s.arguments), PARAMS[s.name])
        assert "".join(d.content for d in deltas) == ""  # nothing of the call leaked as content


def test_json_schema_response_format_through_the_plan(llm):
    template = llm.metadata["tokenizer.chat_template"]
    schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 99},
                                               "unit": {"enum": ["C", "F"]}}, "required": ["answer", "unit"]}
    plan = plan_chat([{"role": "user", "content": "Temperature?"}], template=template, tools=TOOLS, tool_choice="auto",
                     response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
    for seed in range(10):
        _, text, reason, deltas, streamed, batch = run(llm, plan, template, seed)
        assert reason == "stop"
        assert streamed.content == batch.content == text
        jsonschema.validate(json.loads(streamed.content), schema)


def test_ollama_shapes_through_the_plan():
    plan = plan_chat([{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "roll", "arguments": {"sides": 6}}}]}, {"role": "tool", "content": "4"}],
        template="{{ messages }}", tools=TOOLS, ollama_format="json", tool_call_ids="optional",
        enable_thinking=requested_thinking(think=False))
    assert plan.grammar("").startswith("root ::= jobject")
    assert plan.template_kwargs == {"enable_thinking": False}


def test_plan_rejects_bad_requests_before_any_work():
    qwen3ish = "{% if enable_thinking %}<think>{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
    cases = [
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
        (dict(response_format={"type": "json_schema", "json_schema": {"schema": {"type": "object", "not": {}}}}),
         "response_format"),
        (dict(grammar="root ::= missing"), "grammar"),
        (dict(enable_thinking=True), "enable_thinking"),
        (dict(messages=[{"role": "tool", "tool_call_id": "x", "content": "1"}]), "messages"),
    ]
    for kwargs, param in cases:
        messages = kwargs.pop("messages", [{"role": "user", "content": "hi"}])
        with pytest.raises(InvalidInput) as e:
            plan_chat(messages, template="{{ messages }}", **kwargs)
        assert e.value.param == param, e.value.message
    plan = plan_chat([{"role": "user", "content": "hi"}], template=qwen3ish, enable_thinking=True)
    assert plan.template_kwargs == {"enable_thinking": True} and plan.thinking.enabled


def test_native_tool_templates_get_tools_and_keep_structured_history():
    native = "{% for t in tools %}{{ t.function.name }};{% endfor %}{% for m in messages %}{{ m.role }}{% endfor %}"
    plan = plan_chat(HISTORY, template=native, tools=TOOLS)
    assert [t["function"]["name"] for t in plan.template_kwargs["tools"]] == ["get_weather", "roll"]
    assert plan.messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    assert plan.messages[2]["role"] == "tool"
    none = plan_chat(HISTORY, template=native, tools=TOOLS, tool_choice="none")
    assert "tools" not in none.template_kwargs and none.output_parser("")._tools is None
