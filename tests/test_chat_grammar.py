"""Grammars sampled for real: llama.cpp parses every grammar we write, and the random-weight
fixture model, sampled at temperature 1 under it, always produces JSON that validates.

The fixture's output is noise, so nothing but the grammar keeps it valid."""

import ctypes
import datetime
import ipaddress
import json
import math
import re
import uuid

import jsonschema
import llama_cpp
import pytest
from llama_cpp import Llama, LlamaGrammar

from inferd.chat.gbnf import check_gbnf
from inferd.chat.grammar import (json_object_grammar, json_schema_grammar, ollama_format_grammar, request_grammar,
                                 response_format_grammar, tool_call_grammar)
from inferd.chat.tool_parser import parse_tool_calls
from inferd.chat.tools import ToolChoice, validate_tools
from inferd.errors import InvalidInput
from tests.conftest import FIXTURES

SEEDS = range(20)
QUOTE, RBRACE, RBRACKET = 34, 125, 93  # byte-level vocab: token id == byte


@pytest.fixture(scope="module")
def llm():
    return Llama(str(FIXTURES / "gguf" / "tiny-llama.gguf"), n_ctx=256, n_threads=1, verbose=False, seed=0)


def sample(llm, gbnf, *, max_tokens=160, bias=None, prompt="Answer in JSON:"):
    grammar = LlamaGrammar.from_string(gbnf)
    outs = []
    for s in SEEDS:
        c = llm.create_completion(prompt, grammar=grammar, temperature=1.0, seed=s, max_tokens=max_tokens,
                                  logit_bias=bias)["choices"][0]
        assert c["finish_reason"] == "stop", f"seed {s}: grammar did not finish: {c['text']!r}"
        outs.append(c["text"])
    assert len(set(outs)) > 1, "sampling was not random; the test would prove nothing"
    return outs


def llama_accepts(llm, gbnf: str) -> bool:
    p = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
    if p:
        llama_cpp.llama_sampler_free(p)
    return bool(p)


FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER

SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 18, "maximum": 130},
            "score": {"type": "number", "minimum": -2.5, "exclusiveMaximum": 3},
            "ok": {"type": "boolean"},
            "kind": {"enum": ["a", "b", 3, None]},
            "v": {"const": {"x": [1, "y"]}},
        },
        "required": ["name", "age", "kind"],
        "additionalProperties": False,
    },
    "array": {"type": "array", "items": {"type": "integer", "minimum": -20, "maximum": 1500},
              "minItems": 2, "maxItems": 5},
    "tuple": {"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": ["x", "y"]}], "items": False,
              "minItems": 1},
    "nested_refs": {
        "$defs": {
            "point": {"type": "object", "properties": {"x": {"type": "integer", "exclusiveMinimum": 0, "maximum": 99},
                                                       "y": {"$ref": "#/$defs/small"}},
                      "required": ["x", "y"]},
            "small": {"type": "integer", "minimum": -3, "maximum": 3},
        },
        "type": "object",
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 2},
                       "label": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]}},
        "required": ["points", "label"],
    },
    "one_of": {"oneOf": [{"type": "object", "properties": {"t": {"const": "circle"}, "r": {"type": "integer"}},
                          "required": ["t", "r"], "additionalProperties": False},
                         {"type": "object", "properties": {"t": {"const": "square"}, "s": {"type": "boolean"}},
                          "required": ["t", "s"], "additionalProperties": False}]},
    "all_of": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer", "maximum": 5}}, "required": ["a"]},
                         {"properties": {"a": {}, "b": {"type": "boolean"}, "c": {"type": "null"}}, "required": ["b"],
                          "additionalProperties": False}],
               "properties": {"a": {"minimum": 2}, "b": {}}},
    "pattern": {"type": "string", "pattern": r'^[A-Z]{2}-\d{2,4}(x|"q")?$'},
    "formats": {"type": "object", "properties": {f: {"type": "string", "format": f} for f in
                                                  ("date", "time", "date-time", "uuid", "ipv4")},
                "required": ["date", "time", "date-time", "uuid", "ipv4"]},
    "email": {"type": "string", "format": "email"},
    "extra_props": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 9}},
                    "required": ["id"], "additionalProperties": {"type": "boolean"}},
    "types_list": {"type": ["integer", "boolean", "null"]},
    "recursive": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                                   "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                  "required": ["v", "next"], "additionalProperties": False},
}


def check_formats(value):
    datetime.date.fromisoformat(value["date"])
    datetime.time.fromisoformat(value["time"].replace("Z", "+00:00"))
    datetime.datetime.fromisoformat(value["date-time"].replace("Z", "+00:00"))
    uuid.UUID(value["uuid"])
    ipaddress.IPv4Address(value["ipv4"])


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_json_schema_output_always_validates(llm, name):
    schema = SCHEMAS[name]
    gbnf = json_schema_grammar(schema)
    # Biases end free-length parts sooner (a key, an e-mail label, a recursion); the grammar
    # alone still decides what is allowed.
    bias = {"extra_props": {QUOTE: 6.0, RBRACE: 6.0}, "email": {QUOTE: 6.0, ord("@"): 6.0, ord("."): 3.0},
            "recursive": {ord("n"): 4.0}}.get(name)
    for text in sample(llm, gbnf, bias=bias, max_tokens=200):
        value = json.loads(text)
        jsonschema.validate(value, schema, format_checker=FORMATS)
        if name == "formats":
            check_formats(value)
        if name == "email":
            local, _, domain = value.partition("@")
            assert local and "." in domain and "@" not in domain


def test_json_object_and_ollama_json_always_parse(llm):
    # Free-form JSON has unbounded strings; a bias towards closing characters keeps the
    # random model's outputs short. The grammar alone decides what is allowed.
    bias = {QUOTE: 8.0, RBRACE: 8.0, RBRACKET: 8.0}
    for gbnf in (json_object_grammar(), response_format_grammar({"type": "json_object"}),
                 ollama_format_grammar("json")):
        for text in sample(llm, gbnf, bias=bias, max_tokens=200):
            assert isinstance(json.loads(text), dict)


def test_strings_never_hold_raw_control_characters_or_lone_surrogates(llm):
    # llama-cpp-python's own converter lets the random model write raw control characters
    # into strings, which json.loads rejects; ours must not.
    schema = {"type": "array", "items": {"type": "string", "maxLength": 30}, "minItems": 3, "maxItems": 3}
    for text in sample(llm, json_schema_grammar(schema), max_tokens=200):
        value = json.loads(text)  # strict: control characters are an error
        for s in value:
            s.encode("utf-8")  # a lone surrogate escape would fail here


TOOLS = validate_tools([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                      "parameters": {"type": "object",
                                                     "properties": {"city": {"type": "string", "maxLength": 10},
                                                                    "unit": {"enum": ["c", "f"]}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["a", "b"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "now"}},
])
PARAMS = {t.name: t.parameters or {"type": "object", "properties": {}, "additionalProperties": False} for t in TOOLS}


def assert_valid_calls(text, names):
    content, calls = parse_tool_calls(text, TOOLS)
    assert calls, f"no call parsed from {text!r}"
    assert content is None, f"grammar let text outside the calls: {content!r}"
    for c in calls:
        assert c.name in names
        assert c.id.startswith("call_") and int(c.id[5:], 16) >= 0
        jsonschema.validate(json.loads(c.arguments), PARAMS[c.name])
    return calls


def test_tool_choice_required_always_yields_valid_calls(llm):
    seen, counts = set(), set()
    for gbnf in (request_grammar(tools=TOOLS, tool_choice=ToolChoice("required"), parallel_tool_calls=False),
                 tool_call_grammar(TOOLS, max_calls=2)):
        for text in sample(llm, gbnf, max_tokens=240):
            calls = assert_valid_calls(text, {"get_weather", "add", "now"})
            seen |= {c.name for c in calls}
            counts.add(len(calls))
    assert len(seen) >= 2  # the grammar offers every function, not just the first
    assert counts == {1, 2}  # parallel calls happen, and only when allowed


@pytest.mark.parametrize("name", ["get_weather", "add", "now"])
def test_named_tool_choice_always_calls_that_function(llm, name):
    gbnf = request_grammar(tools=TOOLS, tool_choice=ToolChoice("function", name), parallel_tool_calls=False)
    for text in sample(llm, gbnf, max_tokens=160):
        calls = assert_valid_calls(text, {name})
        assert len(calls) == 1


def accepts(llm, gbnf: str, text: str) -> bool:
    """Does llama.cpp's grammar sampler allow exactly `text` and then end-of-generation?

    The fixture's vocabulary has one token per byte (id == byte), so any text can be fed
    byte by byte; a token the grammar forbids gets logit -inf from the sampler."""
    smpl = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
    assert smpl, "llama.cpp rejected the grammar"
    try:
        for tok in [*text.encode("utf-8"), llm.token_eos()]:
            data = (llama_cpp.llama_token_data * 1)()
            data[0].id, data[0].logit, data[0].p = tok, 0.0, 0.0
            arr = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
            if math.isinf(data[0].logit):
                return False
            if tok != llm.token_eos():
                llama_cpp.llama_sampler_accept(smpl, tok)
        return True
    finally:
        llama_cpp.llama_sampler_free(smpl)


def test_thinking_prefix_grammar_is_exactly_one_block_then_the_answer(llm):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    g = json_schema_grammar(schema, reasoning=("<think>", "</think>"))
    for text, ok in [('{"n":1}', True), ('<think>hm, 2+2</think>{"n":4}', True),
                     ('<think>a<</think>\n\n{"n":1}', True), ('<think>é <b>/</think> {"n": -5}', True),
                     ('<think>a</think>b</think>{"n":1}', False), ('<think>a</thin>{"n":1}', False),
                     ('<think>never closed {"n":1}', False), ('x<think></think>{"n":1}', False), ('{"n":1', False)]:
        assert accepts(llm, g, text) is ok, text
    # The prompt already opened the block (DeepSeek-R1 style): the close marker is mandatory.
    g = json_schema_grammar(schema, reasoning=("", "</think>"))
    assert accepts(llm, g, 'thinking...</think>\n{"n":2}') and accepts(llm, g, '</think>{"n":2}')
    assert not accepts(llm, g, '{"n":2}') and not accepts(llm, g, '<think>x</think>{"n":2}x')
    g = tool_call_grammar(TOOLS, "now", reasoning=("<think>", "</think>"))
    assert accepts(llm, g, '<think>call now</think>\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')


@pytest.mark.parametrize("lo,hi", [(-37, 1234), (0, 9), (18, 130), (-5, -1), (7, 7), (None, 42), (-100, None)])
def test_integer_ranges_are_exact(llm, lo, hi):
    schema = {"type": "integer", **({"minimum": lo} if lo is not None else {}), **({"maximum": hi} if hi is not None else {})}
    g = json_schema_grammar(schema)
    start, end = (lo if lo is not None else hi - 300) - 120, (hi if hi is not None else lo + 300) + 120
    for i in range(start, end):
        assert accepts(llm, g, str(i)) is ((lo is None or i >= lo) and (hi is None or i <= hi)), i
    for text in ("007", "-0", "1.0", " 5", "+5"):
        assert not accepts(llm, g, text), text


def test_number_bounds_admit_only_values_in_range(llm):
    for schema in ({"type": "number", "minimum": -2.5, "exclusiveMaximum": 3},
                   {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                   {"type": "number", "minimum": 10}):
        g = json_schema_grammar(schema)
        admitted = []
        for k in range(-400, 1300):
            for text in (str(k / 100), str(k // 100)):
                if accepts(llm, g, text):
                    admitted.append(text)
                    jsonschema.validate(json.loads(text), schema)
        assert len(admitted) > 50, schema


def test_dates_are_exactly_the_valid_calendar_dates(llm):
    g = json_schema_grammar({"type": "string", "format": "date"})
    for year in ("0000", "0004", "1900", "2000", "2023", "2024", "9999"):
        for month in range(0, 14):
            for day in (0, 1, 28, 29, 30, 31, 32):
                text = f"{year}-{month:02d}-{day:02d}"
                try:
                    datetime.date.fromisoformat(text)
                    valid = True
                except ValueError:
                    valid = False
                assert accepts(llm, g, json.dumps(text)) is valid, text


@pytest.mark.parametrize("pattern,texts", [
    (r"^[A-Z]{2}-\d{2,4}$", ["AB-12", "AB-1234", "ab-12", "AB-1", "AB-12345", "XAB-12"]),
    (r"ab+c", ["abc", "xxabbbcyy", "ac", "ab"]),
    (r"^(cat|dog)s?$", ["cat", "dogs", "cats!", "bird"]),
    (r'^[^a-c"]+\.txt$', ["zz.txt", "a.txt", 'q".txt', "é.txt", "x.txtx"]),
    (r"^\S+@\S+$", ["a@b", "a b@c", "@b"]),
    (r'^a"\\b\nc$', ['a"\\b\nc', "a'b"]),
])
def test_patterns_match_what_python_re_matches(llm, pattern, texts):
    g = json_schema_grammar({"type": "string", "pattern": pattern})
    for t in texts:
        assert accepts(llm, g, json.dumps(t, ensure_ascii=False)) is bool(re.search(pattern, t)), t


def test_every_generated_grammar_is_accepted_by_llama_cpp(llm):
    grammars = [json_schema_grammar(s) for s in SCHEMAS.values()]
    grammars += [tool_call_grammar(TOOLS), tool_call_grammar(TOOLS, "add", max_calls=3),
                 json_schema_grammar({"type": "string", "format": "uri"}),
                 json_schema_grammar({"type": "string", "format": "hostname"}),
                 json_schema_grammar({"type": "integer", "minimum": -123456789, "maximum": 98765}),
                 json_schema_grammar({"type": "string", "pattern": r"[^\d\s]+\.(?:txt|md)"}),
                 json_object_grammar(reasoning=("<seed:think>", "</seed:think>"))]
    for g in grammars:
        assert check_gbnf(g) == g
        assert llama_accepts(llm, g), g


# Raw GBNF: what llama.cpp's parser accepts we accept, and what it rejects we reject with a reason.
GOOD_GBNF = [
    'root ::= "yes" | "no"',
    'root ::= item+\nitem ::= [a-z] [0-9]? # comment\n',
    'root ::= ("a"\n  | "b")* "c"{2,5}',
    'root::="x"',
    'root ::= [^"\\\\] "\\x41\\u00e9\\U0001F600"',
    'root ::= x\nx ::= "a" x | ""',
    'root ::= <|im_end|> [a]*?',
]
BAD_GBNF = [  # (grammar, words the message must contain)
    ("root ::= foo", "undefined rule 'foo'"),
    ('x ::= "a"', "no 'root' rule"),
    ('root ::= "a"\n  | "b"', "expected a rule name"),
    ('root ::= "\\q"', "unknown escape"),
    ('root ::= [a-', "unterminated character class"),
    ('root ::= "abc', "unterminated string literal"),
    ('root ::= a_b\na_b ::= "x"', "expected a newline"),
    ('root ::= *', "no preceding item"),
    ('root ::= "a"{3000}', "above 2000"),
    ('root ::= ("a" | root "b")', "left recursion"),
    ('root ::= a\na ::= b "x"\nb ::= "y"? a', "left recursion"),
    ('root ::= "a" (', "expected ')'"),
]
# Rejected by us though llama.cpp's parser "accepts" them: sampling would hang or abort the
# process (an empty language makes its sampler throw), or nothing would be constrained at all.
ABORTING_GBNF = [
    ("", "the grammar is empty"),
    ('root ::= [b-a]', "is empty"),
    ('root ::= "a"{2,1}', "maximum below its minimum"),  # llama.cpp's parser loops, allocating
    ('root ::= "a" root', "can never complete"),
    ('root ::= [^\\x00-\\U0010FFFF]', "matches no character"),
]


def test_raw_gbnf_validation_matches_llama_cpp(llm):
    for g in GOOD_GBNF:
        assert check_gbnf(g) == g
        assert llama_accepts(llm, g), g
    for g, words in BAD_GBNF:
        with pytest.raises(InvalidInput) as e:
            check_gbnf(g)
        assert words in e.value.message and e.value.param == "grammar", (g, e.value.message)
        assert not llama_accepts(llm, g), g


@pytest.mark.parametrize("g,words", ABORTING_GBNF)
def test_raw_gbnf_that_would_crash_llama_cpp_is_a_clean_400(g, words):
    with pytest.raises(InvalidInput) as e:
        check_gbnf(g)
    assert words in e.value.message


def test_invalid_error_names_line_and_column():
    with pytest.raises(InvalidInput) as e:
        check_gbnf('root ::= item\nitem ::= "a" | bogus')
    assert "line 2, column 16" in e.value.message and "bogus" in e.value.message


@pytest.mark.parametrize("schema,words", [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "/: 'uniqueItems'"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}}, "/properties/a: 'multipleOf'"),
    ({"not": {"type": "string"}}, "'not' cannot be enforced"),
    ({"$ref": "https://example.com/s.json"}, "only local references"),
    ({"$ref": "#/$defs/missing"}, "points at nothing"),
    ({"type": "strnig"}, "unknown type 'strnig'"),
    ({"enum": []}, "non-empty array"),
    ({"type": "string", "enum": [1, 2]}, "no 'enum' value is of type 'string'"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, "no integer satisfies"),
    ({"type": "number", "minimum": 0.2, "maximum": 0.8}, "too narrow"),
    ({"type": "object", "required": ["x"], "additionalProperties": False}, "required property 'x' is forbidden"),
    ({"allOf": [{"properties": {"a": {}}, "required": ["a"]}], "additionalProperties": False},
     "required property 'a' is forbidden"),
    ({"type": "string", "pattern": "(?=a)b"}, "lookaround"),
    ({"type": "string", "pattern": r"(a)\1"}, "backreferences"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength <= maxLength"),
    ({"type": "object", "properties": {"me": {"$ref": "#"}}, "required": ["me"]}, "cannot be satisfied"),
    (False, "matches nothing"),
    ([1], "must be an object or a boolean"),
    # Malformed keyword values from a client: each was a TypeError/AttributeError (a 500).
    ({"type": "array", "uniqueItems": True, "maxItems": "3"}, "'minItems'/'maxItems' must be integers"),
    ({"type": "array", "prefixItems": 5}, "'prefixItems' must be an array"),
    ({"$ref": ["#/$defs/a"]}, "'$ref' must be a string"),
    ({"type": "object", "required": [{}]}, "'required' an array of names"),
    ({"allOf": [{"properties": None}, {"type": "object"}]}, "'required' an array of names"),
    ({"anyOf": [{"type": "object"}], "required": 0}, "'required' an array of names"),
    ({"anyOf": [{"$ref": "#/x", "type": "string"}], "type": "string", "x": [1]}, "not supported"),
])
def test_schemas_that_cannot_be_enforced_are_400_naming_the_problem(schema, words):
    with pytest.raises(InvalidInput) as e:
        json_schema_grammar(schema)
    assert words in e.value.message, e.value.message
    assert e.value.param == "response_format"


def test_response_format_shapes():
    assert response_format_grammar(None) is None
    assert response_format_grammar({"type": "text"}) is None
    assert "root ::= jobject" in response_format_grammar({"type": "json_object"})
    g = response_format_grammar({"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                                        "schema": {"type": "boolean"}}})
    assert g.startswith("root ::= jbool")
    for bad, words in [({"type": "json_schema"}, "json_schema must be an object"),
                       ({"type": "json_schema", "json_schema": {"name": "x"}}, "schema is required"),
                       ({"type": "xml"}, "'text', 'json_object' or 'json_schema'"), ("json", "must be an object")]:
        with pytest.raises(InvalidInput) as e:
            response_format_grammar(bad)
        assert words in e.value.message
    assert ollama_format_grammar("") is None and ollama_format_grammar(None) is None
    with pytest.raises(InvalidInput, match="format must be"):
        ollama_format_grammar("yaml")


def test_request_grammar_precedence_and_conflicts():
    forced = ToolChoice("required")
    g = request_grammar(tools=TOOLS, tool_choice=forced, response_format={"type": "json_object"})
    assert "<tool_call>" in g  # the forced call wins over the final-answer format
    assert request_grammar(tools=TOOLS, tool_choice=ToolChoice("auto")) is None
    assert request_grammar(grammar='root ::= "x"') == 'root ::= "x"'
    with pytest.raises(InvalidInput, match="cannot be combined with tool_choice"):
        request_grammar(grammar='root ::= "x"', tools=TOOLS, tool_choice=forced)
    with pytest.raises(InvalidInput, match="cannot be combined with a JSON"):
        request_grammar(grammar='root ::= "x"', response_format={"type": "json_object"})
    with pytest.raises(InvalidInput) as e:
        tool_call_grammar(TOOLS, "ghost")
    assert e.value.param == "tool_choice"


STRICT = validate_tools([
    {"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
        "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {  # not strict
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}},
])


def test_strict_tools_under_auto_constrain_only_the_call(llm):
    """tool_choice 'auto' with a strict tool: free text, or text then calls whose arguments
    obey a strict function's schema (any object for a function that is not strict)."""
    g = request_grammar(tools=STRICT, tool_choice=ToolChoice("auto"), parallel_tool_calls=True)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for text, ok in [("", True), ("It is sunny <b>today</b> <tool", True), (call, True),
                     ("Let me check. " + call, True), (call + "\n" + call, True),
                     ('<tool_call>\n{"name": "lookup", "arguments": {"anything": [1, 2]}}\n</tool_call>', True),
                     ('<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}\n</tool_call>', False),
                     ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Constantinople"}}\n</tool_call>',
                      False),
                     ('<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call>', False),
                     ("<<tool_call>nope", False), (call + " and then some text", False)]:
        assert accepts(llm, g, text) is ok, text
    # no strict tool: unconstrained, as before
    assert request_grammar(tools=TOOLS, tool_choice=ToolChoice("auto")) is None
    # with a JSON response_format the answer is that JSON, or calls
    g = request_grammar(tools=STRICT, tool_choice=ToolChoice("auto"), response_format={"type": "json_object"})
    assert accepts(llm, g, '{"a": 1}') and accepts(llm, g, call) and not accepts(llm, g, "plain text")
    assert not accepts(llm, g, '{"a": 1}' + call)
    with pytest.raises(InvalidInput, match="strict: true"):
        request_grammar(grammar='root ::= "x"', tools=STRICT, tool_choice=ToolChoice("auto"))
    # ignore_eos (end-of-generation banned): the endless variant resumes text after a call
    g = request_grammar(tools=STRICT, tool_choice=ToolChoice("auto"), endless=True)
    assert accepts(llm, g, call + " and then some text " + call + call)
    assert not accepts(llm, g, '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>')
    # the reasoning prefix still comes first
    g = request_grammar(tools=STRICT, tool_choice=ToolChoice("auto"), reasoning=("<think>", "</think>"))
    assert accepts(llm, g, "<think>hm</think>\n" + call) and accepts(llm, g, "plain")
