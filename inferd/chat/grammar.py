"""Grammars that constrain sampling: structured output, forced tool calls, raw GBNF.

Every function returns GBNF text for llama.cpp (`llama_sampler_init_grammar(vocab, text,
"root")`) or None when nothing is constrained, and raises `InvalidInput` (400) naming the
problem. The engine adds the grammar sampler to the request's chain; nothing here touches
llama.cpp, so all of it runs and is tested without a model.

    response_format_grammar(body["response_format"])          # OpenAI / Antfly faces
    ollama_format_grammar(body["format"])                     # Ollama "json" | schema
    tool_call_grammar(specs, choice)                          # tool_choice required / named
    check_gbnf(body["grammar"])                               # raw GBNF from the request
    request_grammar(...)                                      # all of the above, resolved

A forced tool call is written in the Hermes form that `inferd.chat.tools` parses:
`<tool_call>\\n{"name": "fn", "arguments": {...}}\\n</tool_call>`, the arguments obeying that
function's `parameters` schema. With `reasoning=("<think>", "</think>")` a grammar also
lets a thinking model reason first (anything but the closing marker, then the marker);
`reasoning=("", "</think>")` when the prompt already opened the block.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Sequence

from inferd.chat.gbnf import UNIVERSE, CharSet, char_class, check_gbnf, literal
from inferd.chat.schema_grammar import SchemaGrammar
from inferd.chat.tool_parser import HERMES_CLOSE, HERMES_OPEN
from inferd.errors import InvalidInput

if TYPE_CHECKING:
    from inferd.chat.tools import ToolChoice, ToolSpec

__all__ = ["check_gbnf", "json_schema_grammar", "ollama_format_grammar", "request_grammar",
           "response_format_grammar", "strict_tools_grammar", "tool_call_grammar"]

def _finish(g: SchemaGrammar, root: str, reasoning: tuple[str, str] | None,
            extra: dict[str, str] | None = None) -> str:
    extra = dict(extra or {})
    if reasoning:
        _through_marker(reasoning[1], extra)
        if reasoning[0]:  # the model may think first
            root = f'( {literal(reasoning[0])} think-s0 [ \\n]{{0,2}} )? {root}'
        else:  # the prompt already opened the block: finish thinking, then answer
            root = f'think-s0 [ \\n]{{0,2}} {root}'
    return g.text(root, extra)


def _marker_steps(marker: str) -> tuple[str, list[list[tuple[int, str]]]]:
    """A DFA over how much of `marker` is matched (KMP): the character class of every other
    character (back to state 0), and per state the (next state, character class) pairs of the
    marker's own characters; state len(marker) is "the marker is complete"."""
    n = len(marker)
    fail = [0] * n
    for i in range(1, n):
        k = fail[i - 1]
        while k and marker[i] != marker[k]:
            k = fail[k - 1]
        fail[i] = k + (marker[i] == marker[k])

    def step(state: int, ch: str) -> int:
        while state and ch != marker[state]:
            state = fail[state - 1]
        return state + (ch == marker[state])

    alphabet = "".join(sorted(set(marker)))
    other = char_class(UNIVERSE - CharSet.of(alphabet))
    states = []
    for s in range(n):
        targets: dict[int, list[str]] = {}
        for ch in alphabet:
            targets.setdefault(step(s, ch), []).append(ch)
        states.append([(t, char_class(CharSet.of("".join(chars)))) for t, chars in sorted(targets.items())])
    return other, states


def _through_marker(marker: str, rules: dict[str, str]) -> None:
    """Rules `think-s<k>`: any text up to and including the first occurrence of `marker`.

    One rule per DFA state (_marker_steps), so text such as '<</think>' cannot hide the marker
    inside a longer false start: the rule ends exactly where the marker first completes.
    """
    other, states = _marker_steps(marker)
    for s, moves in enumerate(states):
        alts = [f"{other} think-s0"] + [cls if t == len(marker) else f"{cls} think-s{t}" for t, cls in moves]
        rules[f"think-s{s}"] = " | ".join(alts)


def json_schema_grammar(schema, *, param: str = "response_format",
                        reasoning: tuple[str, str] | None = None) -> str:
    """A grammar for JSON documents that validate against `schema` (dict or bool)."""
    g = SchemaGrammar(param)
    return _finish(g, g.visit(schema, ""), reasoning)


def json_object_grammar(*, param: str = "response_format", reasoning: tuple[str, str] | None = None) -> str:
    """Any JSON object (OpenAI `json_object`, Ollama `format: "json"`)."""
    g = SchemaGrammar(param)
    return _finish(g, g.prim("jobject"), reasoning)


def response_format_grammar(response_format, *, param: str = "response_format",
                            reasoning: tuple[str, str] | None = None) -> str | None:
    """OpenAI `response_format`: None/text -> None; json_object; json_schema{schema, strict}."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise InvalidInput("response_format must be an object", param=param)
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        # llama-server's extension: a schema next to json_object constrains it further.
        if "schema" in response_format and response_format["schema"] is not None:
            schema = response_format["schema"]
            if not isinstance(schema, (dict, bool)):  # as under json_schema: never silently dropped
                raise InvalidInput("response_format.schema must be a JSON schema (an object or a boolean), "
                                   f"not {type(schema).__name__}", param=param)
            return json_schema_grammar(schema, param=param, reasoning=reasoning)
        return json_object_grammar(param=param, reasoning=reasoning)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            raise InvalidInput("response_format.json_schema must be an object with a 'schema'", param=param)
        if "schema" not in spec:
            raise InvalidInput("response_format.json_schema.schema is required", param=param)
        return json_schema_grammar(spec["schema"], param=param, reasoning=reasoning)
    raise InvalidInput(f"response_format.type must be 'text', 'json_object' or 'json_schema', not {kind!r}",
                       param=param)


def ollama_format_grammar(fmt, *, param: str = "format", reasoning: tuple[str, str] | None = None) -> str | None:
    """Ollama `format`: "" / None -> None, "json" -> any object, an object -> that schema."""
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return json_object_grammar(param=param, reasoning=reasoning)
    if isinstance(fmt, dict):
        return json_schema_grammar(fmt, param=param, reasoning=reasoning)
    raise InvalidInput(f"format must be \"json\" or a JSON schema object, not {fmt!r}", param=param)


def _tool_call_rule(g: SchemaGrammar, tools: Sequence[ToolSpec], *, lenient: bool) -> str:
    """The rule `tool-call`'s body: one Hermes call of one of `tools`, name and arguments tied
    (`{"name": "f", "arguments": <f's schema>}`). A function without `parameters` takes `{}`
    (OpenAI: no arguments). `lenient`: a tool that is not `strict` takes any JSON object (the
    arguments of a call the model chose under tool_choice 'auto'; only strict tools are held
    to their schema there)."""
    ws = g.prim("ws")
    calls = []
    for i, t in enumerate(tools):
        where = f"/{i}/function/parameters"
        if lenient and not t.strict:
            args = g.prim("jobject")
        else:
            params = t.parameters if t.parameters is not None else {"type": "object", "properties": {},
                                                                      "additionalProperties": False}
            args = g.visit(params, where)
        body = (f'"{{" {ws} "\\"name\\"" {ws} ":" {ws} {literal(_json_str(t.name))} {ws} "," {ws} '
                f'"\\"arguments\\"" {ws} ":" {ws} {args} {ws} "}}"')
        calls.append(g.rule(f"call-{t.name}", body))
    return f'( {" | ".join(calls)} ) "\\n"? {literal(HERMES_CLOSE)}'


def _more_calls(max_calls: int) -> str:
    return f' ( "\\n" tool-call ){{0,{max_calls - 1}}}' if max_calls > 1 else ""


def tool_call_grammar(tools: Sequence[ToolSpec], name: str | None = None, *, max_calls: int = 1,
                      param: str = "tools", reasoning: tuple[str, str] | None = None) -> str:
    """Force 1..max_calls Hermes tool calls of the offered functions (or only `name`), each
    call's arguments obeying that function's `parameters` schema."""
    chosen = [t for t in tools if name is None or t.name == name]
    if not chosen:
        raise InvalidInput(f"tool_choice names function {name!r}, which is not among the offered tools",
                           param="tool_choice")
    g = SchemaGrammar(param)
    one = f'{literal(HERMES_OPEN)} "\\n"? {_tool_call_rule(g, chosen, lenient=False)}'
    return _finish(g, "tool-call" + _more_calls(max(max_calls, 1)), reasoning, {"tool-call": one})


def strict_tools_grammar(tools: Sequence[ToolSpec], *, max_calls: int = 1, param: str = "tools",
                         structured: dict | bool | None = None, reasoning: tuple[str, str] | None = None,
                         endless: bool = False) -> str:
    """tool_choice 'auto' with `strict` tools: the model answers or calls, as it likes, but a
    call it starts obeys the schema of a strict function (any object for the others).

    Free text (`text-s<k>`, a KMP automaton over `<tool_call>` like `_through_marker`'s, that
    may end in any state) runs until the text first spells `<tool_call>`; from there on the
    output is that call, then up to max_calls-1 more. With `structured` (a JSON
    response_format's schema, or True for any object) the answer is that JSON document
    instead of free text: `answer | calls`.

    `endless` (for ignore_eos, where end-of-generation is banned): free text resumes after a
    call, so that every state has a next character and the grammar never completes (a
    complete grammar with its only way out banned aborts llama.cpp); calls are then not
    counted. Only without `structured`, whose document must end."""
    g = SchemaGrammar(param)
    call = _tool_call_rule(g, tools, lenient=True)
    more = _more_calls(max(max_calls, 1))
    rules = {"tool-call": f'{literal(HERMES_OPEN)} "\\n"? {call}', "call-tail": f'"\\n"? {call}{more}'}
    if structured is not None:
        answer = g.prim("jobject") if structured is True else g.visit(structured, "")
        return _finish(g, f"( {answer} | tool-call{more} )", reasoning, rules)
    if endless:
        rules["call-tail"] = f'"\\n"? {call} text-s0'
    _free_text_until(HERMES_OPEN, "call-tail", rules)
    return _finish(g, "text-s0", reasoning, rules)


def _free_text_until(marker: str, then: str, rules: dict[str, str]) -> None:
    """Rules `text-s<k>`: any text that may end anywhere, except that once it spells `marker`
    the rule `then` must follow (state k: the longest prefix of the marker just written)."""
    other, states = _marker_steps(marker)
    for s, moves in enumerate(states):
        alts = [f"{other} text-s0"] + [f"{cls} {then}" if t == len(marker) else f"{cls} text-s{t}" for t, cls in moves]
        rules[f"text-s{s}"] = f'( {" | ".join(alts)} )?'


def _json_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def request_grammar(*, grammar=None, response_format=None, ollama_format=None, tools: Sequence[ToolSpec] = (),
                    tool_choice: ToolChoice | None = None, parallel_tool_calls: bool = True,
                    reasoning: tuple[str, str] | None = None, endless: bool = False) -> str | None:
    """The one grammar for a chat request, or None.

    Precedence: a forced tool choice (required / named) wins, since that turn's output is
    the call, not the final answer; otherwise raw `grammar`, `response_format` or Ollama
    `format`. Raw `grammar` together with a forced tool choice or a structured format is
    contradictory -> 400. `reasoning` (open, close) lets thinking models think first; it is
    not applied to raw grammars, which the user controls completely. Strict tools under
    tool_choice 'auto' hold a call's arguments to the schema (`strict_tools_grammar`;
    `endless` asks for its variant that never completes, for ignore_eos).
    """
    forced = tool_choice is not None and tool_choice.forced
    strict_auto = (tool_choice is not None and tool_choice.mode == "auto" and any(t.strict for t in tools))
    structured = response_format_grammar(response_format, reasoning=reasoning) if response_format is not None else None
    if ollama_format not in (None, ""):
        structured = ollama_format_grammar(ollama_format, reasoning=reasoning)
    if grammar is not None:
        if forced:
            raise InvalidInput("'grammar' cannot be combined with tool_choice 'required' or a named function",
                               param="grammar")
        if strict_auto:  # a strict tool's schema is a grammar too; two grammars do not compose
            raise InvalidInput("'grammar' cannot be combined with tools whose function has strict: true",
                               param="grammar")
        if structured is not None:
            raise InvalidInput("'grammar' cannot be combined with a JSON response_format/format", param="grammar")
        return check_gbnf(grammar)
    if forced:
        assert tool_choice is not None
        return tool_call_grammar(tools, tool_choice.name if tool_choice.mode == "function" else None,
                                 max_calls=4 if parallel_tool_calls else 1, reasoning=reasoning)
    if strict_auto:
        schema = _structured_schema(response_format, ollama_format)
        return strict_tools_grammar(tools, max_calls=4 if parallel_tool_calls else 1, reasoning=reasoning,
                                    structured=schema, endless=endless and schema is None)
    return structured


def _structured_schema(response_format, ollama_format) -> dict | bool | None:
    """The JSON schema a structured format asks for (True: any object), or None for text;
    only called once the format has been validated by building its grammar."""
    if ollama_format not in (None, ""):
        return True if ollama_format == "json" else ollama_format
    if not isinstance(response_format, dict) or response_format.get("type") in (None, "text"):
        return None
    if response_format["type"] == "json_object":
        schema = response_format.get("schema")
        return True if schema is None else schema
    return response_format["json_schema"]["schema"]
