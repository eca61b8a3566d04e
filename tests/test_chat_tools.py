"""Tool calling without a model: definitions, tool_choice, history checks, prompting, and
parsing realistic outputs of each format, batch and streamed in every possible split."""

import json
import random

import jinja2
import pytest

from inferd.chat.tool_parser import ToolCallStreamParser, parse_tool_calls
from inferd.chat.tools import (ToolChoice, inline_tools, prepare_messages, resolve_tool_choice,
                               template_renders_tools, validate_tools)
from inferd.errors import InvalidInput
from inferd.types import ToolCall

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}
SPECS = validate_tools([WEATHER, ADD])

# What real models write (Qwen2.5 / Hermes, Llama 3.1/3.2, Mistral v3 and v11+).
OUTPUTS = {
    "hermes": ('I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2.5}}\n</tool_call>',
               "I will check.", [("get_weather", {"city": "Paris"}), ("add", {"a": 1, "b": 2.5})]),
    "hermes_only": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich \\"old town\\""}}\n</tool_call>',
                    None, [("get_weather", {"city": 'Zürich "old town"'})]),
    "hermes_string_args": ('<tool_call>{"name": "add", "arguments": "{\\"a\\": 3}"}</tool_call>', None,
                           [("add", {"a": 3})]),
    "hermes_unclosed": ('<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n', None, [("add", {"a": 1})]),
    "llama3": ('{"name": "get_weather", "parameters": {"city": "Oslo"}}', None, [("get_weather", {"city": "Oslo"})]),
    "llama3_tag": ('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 1}}; '
                   '{"name": "get_weather", "parameters": {"city": "Rome"}}', None,
                   [("add", {"a": 1, "b": 1}), ("get_weather", {"city": "Rome"})]),
    "llama3_typed": ('{"type": "function", "name": "add", "parameters": {}}', None, [("add", {})]),
    "mistral": ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lyon"}, "id": "abcDEF123"}]', None,
                [("get_weather", {"city": "Lyon"})]),
    "mistral_v11": ('[TOOL_CALLS]get_weather[ARGS]{"city": "Nice"}[TOOL_CALLS]add[ARGS]{"a": 2}', None,
                    [("get_weather", {"city": "Nice"}), ("add", {"a": 2})]),
    "plain": ("The weather in Paris is sunny, 21°C. <b>Enjoy</b> [1] {ok}", "The weather in Paris is sunny, 21°C. "
              "<b>Enjoy</b> [1] {ok}", []),
    "json_answer": ('{"answer": 42, "name": "x"}', '{"answer": 42, "name": "x"}', []),
    "json_list_answer": ("[1, 2, 3]", "[1, 2, 3]", []),
    "bad_json_block": ("Hmm <tool_call>{not json}</tool_call> ok", "Hmm <tool_call>{not json}</tool_call> ok", []),
    "unknown_function": ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
                         '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', []),
    "not_a_call_name_key": ('{"name": "Bob", "age": 3}', '{"name": "Bob", "age": 3}', []),
    "almost_marker": ("a <tool_c b [TOOL_CALL c <tool_call", "a <tool_c b [TOOL_CALL c <tool_call", []),
}


def as_tuples(calls):
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_parse_formats(name):
    text, content, calls = OUTPUTS[name]
    got_content, got_calls = parse_tool_calls(text, SPECS)
    assert got_content == content
    assert as_tuples(got_calls) == calls
    assert [c.index for c in got_calls] == list(range(len(calls)))
    assert len({c.id for c in got_calls}) == len(calls)
    for c in got_calls:
        assert c.id.startswith("call_") and len(c.id) == 29
        assert c.openai() == {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        assert c.ollama()["function"]["arguments"] == json.loads(c.arguments)  # an object, not a string


def stream(text, cuts):
    p = ToolCallStreamParser(SPECS)
    pieces, calls, prev = [], [], 0
    for cut in [*cuts, len(text)]:
        out = p.feed(text[prev:cut])
        pieces.append(out.content)
        calls += out.calls
        prev = cut
    out = p.finish()
    pieces.append(out.content)
    calls += out.calls
    return pieces, calls


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_streaming_agrees_with_batch_for_every_split(name):
    text, content, calls = OUTPUTS[name]
    rng = random.Random(0)
    splits = [[i] for i in range(1, len(text))] + [list(range(1, len(text)))]  # every 2-way split, char by char
    splits += [sorted(rng.sample(range(1, len(text)), k=min(5, len(text) - 1))) for _ in range(20)]
    for cuts in splits:
        pieces, got = stream(text, cuts)
        assert ("".join(pieces) or None) == content, cuts
        assert as_tuples(got) == calls, cuts
        if calls:  # no piece of a call's text ever reaches the content stream
            for piece in pieces:
                for marker in ("<tool_call", "[TOOL_CALLS", '"arguments"', '"parameters"', "</tool_call>"):
                    assert marker not in piece, (cuts, piece)


def test_streamed_content_arrives_before_the_call_and_is_not_delayed_needlessly():
    p = ToolCallStreamParser(SPECS)
    assert p.feed("Let me ").content == "Let me"
    assert p.feed("look. <tool").content == " look."  # '<tool' is held: it may open a call
    out = p.feed('_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
    assert out.content == "" and out.calls[0].name == "add"
    assert out.calls[0].openai_delta()["index"] == 0
    assert p.finish().content == ""


def test_validate_tools_errors_name_the_field():
    for tools, words in [("x", "tools must be an array"),
                         ([{"type": "retrieval"}], "tools[0].type must be 'function'"),
                         ([{"type": "function"}], "tools[0].function must be an object"),
                         ([{"type": "function", "function": {"name": "has space"}}], "tools[0].function.name"),
                         ([WEATHER, WEATHER], "tools[1]: function 'get_weather' is defined twice"),
                         ([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
                          "must describe an object"),
                         ([{"type": "function", "function": {"name": "f", "parameters": []}}], "JSON schema object")]:
        with pytest.raises(InvalidInput) as e:
            validate_tools(tools)
        assert words in e.value.message and e.value.param == "tools"
    assert validate_tools(None) == []
    assert validate_tools([WEATHER])[0].openai() == WEATHER


def test_tool_choice():
    assert resolve_tool_choice(None, SPECS) == ToolChoice("auto")
    assert resolve_tool_choice(None, []) == ToolChoice("none")
    assert resolve_tool_choice("none", SPECS).offered(SPECS) == []
    assert resolve_tool_choice("required", SPECS).forced
    assert resolve_tool_choice({"type": "function", "function": {"name": "add"}}, SPECS) == ToolChoice("function", "add")
    for choice, tools, words in [("always", SPECS, "must be 'auto'"), ("required", [], "needs at least one tool"),
                                 ({"type": "function", "function": {"name": "ghost"}}, SPECS, "'ghost'"),
                                 ({"type": "function"}, SPECS, "name is required"), (3, SPECS, "must be a string")]:
        with pytest.raises(InvalidInput) as e:
            resolve_tool_choice(choice, tools)
        assert words in e.value.message and e.value.param == "tool_choice"


HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and 1+2?"},
    {"role": "assistant", "content": None, "reasoning_content": "I should call tools.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    {"role": "tool", "tool_call_id": "call_2", "content": "3"},
    {"role": "user", "content": "Thanks"},
]


def test_prepare_messages_normalises_for_templates():
    msgs = prepare_messages(HISTORY)
    a = msgs[2]
    assert a["content"] == "" and "reasoning_content" not in a  # output-only fields are not replayed
    assert a["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}  # dicts, as HF templates expect
    assert HISTORY[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'  # input untouched
    ollama = prepare_messages([{"role": "assistant", "content": "", "thinking": "hmm", "tool_calls": [
        {"function": {"name": "add", "arguments": {"a": 1}}}]}, {"role": "tool", "content": "1", "tool_name": "add"}],
        tool_call_ids="optional")
    assert ollama[0]["tool_calls"][0]["id"].startswith("call_") and "thinking" not in ollama[0]


@pytest.mark.parametrize("mutate,words", [
    (lambda h: h[3].update(tool_call_id="call_9"), "messages[3].tool_call_id 'call_9' does not match"),
    (lambda h: h[3].pop("tool_call_id"), "messages[3].tool_call_id is required"),
    (lambda h: h[2]["tool_calls"][0]["function"].update(arguments="{city: Paris}"),
     "messages[2].tool_calls[0].function.arguments is not valid JSON"),
    (lambda h: h[2]["tool_calls"][1]["function"].update(arguments="[1, 2]"), "must encode a JSON object"),
    (lambda h: h[2]["tool_calls"][1].update(id="call_1"), "used by more than one tool call"),
    (lambda h: h[2]["tool_calls"][0]["function"].pop("name"), "tool_calls[0].function.name is required"),
    (lambda h: h[2]["tool_calls"][0].pop("id"), "tool_calls[0].id is required"),
    (lambda h: h[1].update(tool_calls=[]), "only assistant messages may have tool_calls"),
    (lambda h: h.insert(1, {"role": "tool", "tool_call_id": "call_1", "content": "early"}), "does not match"),
])
def test_malformed_history_is_invalid_input(mutate, words):
    h = json.loads(json.dumps(HISTORY))
    mutate(h)
    with pytest.raises(InvalidInput) as e:
        prepare_messages(h)
    assert words in e.value.message and e.value.param == "messages"


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Gemma's rule that breaks naive tool prompting: roles must alternate user/model.
GEMMA_LIKE = ("{% for m in messages %}{% if m['role'] == 'system' %}{% set ns = 1 %}"
              "{% elif (m['role'] == 'user') != (loop.index0 % 2 == (1 if messages[0]['role'] == 'system' else 0)) %}"
              "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
              "{% endif %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}")


def render(template, messages):
    env = jinja2.Environment()

    def raise_exception(msg):
        raise jinja2.TemplateError(msg)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def test_inline_tools_renders_history_in_templates_without_tool_support():
    assert not template_renders_tools(CHATML) and not template_renders_tools(GEMMA_LIKE)
    assert template_renders_tools("{%- if tools %}{{ tools | tojson }}{% endif %}")
    msgs = inline_tools(prepare_messages(HISTORY), SPECS, ToolChoice("auto"))
    text = render(CHATML, msgs)
    assert text.count("<|im_start|>system") == 1 and "Be brief.\n\n# Tools" in text
    assert json.dumps(SPECS[0].openai()) in text and "<tools>" in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert '<tool_response>\n{"temp": 21}\n</tool_response>\n<tool_response>\n3\n</tool_response>\nThanks' in text
    assert "None" not in text and "I should call tools" not in text
    render(GEMMA_LIKE, msgs)  # roles alternate after tool results are merged into the user turn
    with pytest.raises(jinja2.TemplateError):
        render(GEMMA_LIKE, prepare_messages(HISTORY))  # what a naive server would send
    forced = inline_tools(prepare_messages(HISTORY[:2]), SPECS, ToolChoice("function", "add"))
    assert forced[0]["content"].endswith("Call the function 'add' now.")
    assert inline_tools([{"role": "user", "content": "hi"}], SPECS)[0]["role"] == "system"
    parts = inline_tools(prepare_messages([HISTORY[1], {**HISTORY[2], "content": [{"type": "text", "text": "Checking."}]},
                                           {**HISTORY[3], "content": [{"type": "text", "text": "21C"}]}]), [])
    assert parts[1]["content"].startswith("Checking.\n<tool_call>\n")
    assert parts[2] == {"role": "user", "content": "<tool_response>\n21C\n</tool_response>"}


def test_tool_call_shapes():
    c = ToolCall("add", '{"a": 1}', index=2)
    assert c.openai_delta() == {"index": 2, "id": c.id, "type": "function",
                                "function": {"name": "add", "arguments": '{"a": 1}'}}
    assert c.ollama() == {"function": {"index": 2, "name": "add", "arguments": {"a": 1}}}
