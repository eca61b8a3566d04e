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
           "response_format_grammar", "tool_call_grammar"]

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


def _through_marker(marker: str, rules: dict[str, str]) -> None:
    """Rules `think-s<k>`: any text up to and including the first occurrence of `marker`.

    A DFA over how much of the marker is matched (KMP), one rule per state, so text such as
    '<</think>' cannot hide the marker inside a longer false start: the rule ends exactly
    where the marker first completes.
    """
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
    for s in range(n):
        targets: dict[int, list[str]] = {}
        for ch in alphabet:
            targets.setdefault(step(s, ch), []).append(ch)
        alts = [f"{other} think-s0"]
        for t, chars in sorted(targets.items()):
            cls = char_class(CharSet.of("".join(chars)))
            alts.append(cls if t == n else f"{cls} think-s{t}")
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


def tool_call_grammar(tools: Sequence[ToolSpec], name: str | None = None, *, max_calls: int = 1,
                      param: str = "tools", reasoning: tuple[str, str] | None = None) -> str:
    """Force 1..max_calls Hermes tool calls of the offered functions (or only `name`).

    Each call's name and arguments are tied: `{"name": "f", "arguments": <f's schema>}`.
    A function without `parameters` takes `{}` (OpenAI: no arguments).
    """
    chosen = [t for t in tools if name is None or t.name == name]
    if not chosen:
        raise InvalidInput(f"tool_choice names function {name!r}, which is not among the offered tools",
                           param="tool_choice")
    g = SchemaGrammar(param)
    ws = g.prim("ws")
    calls = []
    for i, t in enumerate(chosen):
        where = f"/{i}/function/parameters"
        params = t.parameters if t.parameters is not None else {"type": "object", "properties": {},
                                                                  "additionalProperties": False}
        args = g.visit(params, where)
        body = (f'"{{" {ws} "\\"name\\"" {ws} ":" {ws} {literal(_json_str(t.name))} {ws} "," {ws} '
                f'"\\"arguments\\"" {ws} ":" {ws} {args} {ws} "}}"')
        calls.append(g.rule(f"call-{t.name}", body))
    one = (f'{literal(HERMES_OPEN)} "\\n"? ( {" | ".join(calls)} ) "\\n"? {literal(HERMES_CLOSE)}')
    root = f'tool-call ( "\\n" tool-call ){{0,{max(max_calls, 1) - 1}}}' if max_calls > 1 else "tool-call"
    return _finish(g, root, reasoning, {"tool-call": one})


def _json_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def request_grammar(*, grammar=None, response_format=None, ollama_format=None, tools: Sequence[ToolSpec] = (),
                    tool_choice: ToolChoice | None = None, parallel_tool_calls: bool = True,
                    reasoning: tuple[str, str] | None = None) -> str | None:
    """The one grammar for a chat request, or None.

    Precedence: a forced tool choice (required / named) wins, since that turn's output is
    the call, not the final answer; otherwise raw `grammar`, `response_format` or Ollama
    `format`. Raw `grammar` together with a forced tool choice or a structured format is
    contradictory -> 400. `reasoning` (open, close) lets thinking models think first; it is
    not applied to raw grammars, which the user controls completely.
    """
    forced = tool_choice is not None and tool_choice.forced
    structured = response_format_grammar(response_format, reasoning=reasoning) if response_format is not None else None
    if ollama_format not in (None, ""):
        structured = ollama_format_grammar(ollama_format, reasoning=reasoning)
    if grammar is not None:
        if forced:
            raise InvalidInput("'grammar' cannot be combined with tool_choice 'required' or a named function",
                               param="grammar")
        if structured is not None:
            raise InvalidInput("'grammar' cannot be combined with a JSON response_format/format", param="grammar")
        return check_gbnf(grammar)
    if forced:
        assert tool_choice is not None
        return tool_call_grammar(tools, tool_choice.name if tool_choice.mode == "function" else None,
                                 max_calls=4 if parallel_tool_calls else 1, reasoning=reasoning)
    return structured
