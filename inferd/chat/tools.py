"""Tool calling, request side: definitions, tool_choice, history, prompting.

The parts a face calls before rendering the prompt (all pure; errors are `InvalidInput`):

    specs  = validate_tools(body.get("tools"))                 # -> list[ToolSpec]
    choice = resolve_tool_choice(body.get("tool_choice"), specs)  # -> ToolChoice
    msgs   = prepare_messages(body["messages"], tool_call_ids="required")  # 400 on bad history
    if choice.offers_tools and template_renders_tools(template):
        template kwargs: tools=[s.openai() for s in choice.offered(specs)]
    elif choice.offers_tools:
        msgs = inline_tools(msgs, choice.offered(specs), choice)   # Hermes <tools> system prompt
    else:
        msgs = inline_tools(msgs, [], choice)   # still turn tool history into plain text

The output side (parsing calls out of generated text, streaming) is `inferd.chat.tool_parser`;
the grammar that forces a call is `inferd.chat.grammar.tool_call_grammar`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from inferd.errors import InvalidInput
from inferd.types import new_call_id

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's rule for function names
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # output-only: never replayed


@dataclass(frozen=True)
class ToolSpec:
    """One offered function. `parameters` is its JSON schema (None: takes no arguments)."""

    name: str
    description: str = ""
    parameters: dict | None = None
    strict: bool = False

    def openai(self) -> dict:
        """The OpenAI tool shape, as chat templates expect it in `tools`."""
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        fn["parameters"] = self.parameters if self.parameters is not None else {"type": "object", "properties": {}}
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolChoice:
    """What the model may do: `auto`, `none`, `required` (some call), `function` (call `name`)."""

    mode: Literal["auto", "none", "required", "function"]
    name: str | None = None

    @property
    def offers_tools(self) -> bool:
        return self.mode != "none"

    @property
    def forced(self) -> bool:
        """True when a grammar must force the output to be a call."""
        return self.mode in ("required", "function")

    def offered(self, specs: list[ToolSpec]) -> list[ToolSpec]:
        """The tools to show the model: none for `none`, all otherwise (OpenAI shows all)."""
        return [] if self.mode == "none" else list(specs)


def validate_tools(tools, param: str = "tools") -> list[ToolSpec]:
    """Check the request's `tools` (OpenAI/Ollama shape) and return them as ToolSpecs."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidInput("tools must be an array", param=param)
    specs, seen = [], set()
    for i, t in enumerate(tools):
        where = f"{param}[{i}]"
        if not isinstance(t, dict):
            raise InvalidInput(f"{where} must be an object", param=param)
        if t.get("type", "function") != "function":
            raise InvalidInput(f"{where}.type must be 'function', not {t.get('type')!r}", param=param)
        fn = t.get("function")
        if not isinstance(fn, dict):
            raise InvalidInput(f"{where}.function must be an object with a 'name'", param=param)
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise InvalidInput(f"{where}.function.name must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-'",
                               param=param)
        if name in seen:
            raise InvalidInput(f"{where}: function {name!r} is defined twice", param=param)
        seen.add(name)
        params = fn.get("parameters")
        if params is not None:
            if not isinstance(params, dict):
                raise InvalidInput(f"{where}.function.parameters must be a JSON schema object", param=param)
            if params.get("type", "object") != "object":
                raise InvalidInput(f"{where}.function.parameters must describe an object (type 'object')",
                                   param=param)
        desc = fn.get("description") or ""
        if not isinstance(desc, str):
            raise InvalidInput(f"{where}.function.description must be a string", param=param)
        specs.append(ToolSpec(name, desc, params, bool(fn.get("strict", False))))
    return specs


def resolve_tool_choice(tool_choice, specs: list[ToolSpec], param: str = "tool_choice") -> ToolChoice:
    """Interpret `tool_choice`; the default is `auto` with tools and `none` without."""
    if tool_choice is None:
        return ToolChoice("auto" if specs else "none")
    if isinstance(tool_choice, str):
        if tool_choice not in ("auto", "none", "required"):
            raise InvalidInput(f"tool_choice must be 'auto', 'none', 'required' or a function, not {tool_choice!r}",
                               param=param)
        if tool_choice == "required" and not specs:
            raise InvalidInput("tool_choice 'required' needs at least one tool in 'tools'", param=param)
        if tool_choice == "auto" and not specs:
            return ToolChoice("none")
        # an explicit 'auto' is the default with tools (it was read as 'none' before: tools dropped)
        return ToolChoice("required" if tool_choice == "required" else "auto" if tool_choice == "auto" else "none")
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool_choice.get("name")
        if not isinstance(name, str):
            raise InvalidInput("tool_choice.function.name is required", param=param)
        if name not in {s.name for s in specs}:
            raise InvalidInput(f"tool_choice names function {name!r}, which is not among the offered tools",
                               param=param)
        return ToolChoice("function", name)
    raise InvalidInput('tool_choice must be a string or {"type": "function", "function": {"name": ...}}',
                       param=param)


def _arguments_object(raw, where: str, param: str) -> dict:
    """Arguments of a history tool call: a JSON string of an object, or (Ollama) an object."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, str):
        raise InvalidInput(f"{where}.function.arguments must be a JSON string", param=param)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"{where}.function.arguments is not valid JSON: {e.msg} at position {e.pos}",
                           param=param) from None
    if not isinstance(value, dict):
        raise InvalidInput(f"{where}.function.arguments must encode a JSON object", param=param)
    return value


def prepare_messages(messages, *, tool_call_ids: Literal["required", "optional"] = "required",
                     param: str = "messages") -> list[dict]:
    """Validate the tool parts of a chat history; return copies ready for a chat template.

    - assistant `tool_calls`: each needs `function.name`; `arguments` must be a JSON object
      (string or, for Ollama, an object) and becomes a dict, as HF templates expect; ids
      must be unique; a missing id is generated when ids are optional (Ollama).
    - `role: tool` messages must carry a `tool_call_id` of an earlier assistant call
      (optional for Ollama, which names the tool in `tool_name` instead).
    - reasoning fields (`reasoning_content`, `thinking`) are dropped: output-only.
    - `content: null` becomes "" so templates never print "None".
    Other fields (roles, content parts, images) pass through untouched for the renderer.
    """
    if not isinstance(messages, list):
        raise InvalidInput("messages must be an array", param=param)
    out, known_ids = [], set()
    for i, m in enumerate(messages):
        where = f"{param}[{i}]"
        if not isinstance(m, dict):
            raise InvalidInput(f"{where} must be an object", param=param)
        m = {k: v for k, v in m.items() if k not in REASONING_FIELDS}
        if m.get("content") is None:
            m["content"] = ""
        role = m.get("role")
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant":
                raise InvalidInput(f"{where}: only assistant messages may have tool_calls", param=param)
            if not isinstance(calls, list):
                raise InvalidInput(f"{where}.tool_calls must be an array", param=param)
            norm = []
            for j, c in enumerate(calls):
                cw = f"{where}.tool_calls[{j}]"
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                    raise InvalidInput(f"{cw}.function.name is required", param=param)
                if c.get("type", "function") != "function":
                    raise InvalidInput(f"{cw}.type must be 'function'", param=param)
                cid = c.get("id")
                if cid is None and tool_call_ids == "optional":
                    cid = new_call_id()
                if not isinstance(cid, str) or not cid:
                    raise InvalidInput(f"{cw}.id is required", param=param)
                if cid in known_ids:
                    raise InvalidInput(f"{cw}.id {cid!r} is used by more than one tool call", param=param)
                known_ids.add(cid)
                norm.append({"id": cid, "type": "function",
                             "function": {"name": fn["name"], "arguments": _arguments_object(fn.get("arguments"), cw, param)}})
            if norm:
                m["tool_calls"] = norm
            else:
                del m["tool_calls"]
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid is None and tool_call_ids == "optional":
                pass
            elif not isinstance(cid, str) or not cid:
                raise InvalidInput(f"{where}.tool_call_id is required for role 'tool'", param=param)
            elif cid not in known_ids:
                raise InvalidInput(f"{where}.tool_call_id {cid!r} does not match any earlier assistant tool call",
                                   param=param)
        out.append(m)
    return out


_TOOLS_WORD = re.compile(r"\btools\b")


def template_renders_tools(template: str | None) -> bool:
    """Whether a Jinja chat template renders `tools` itself (Qwen, Llama 3.1, Mistral, ...)."""
    return bool(template) and bool(_TOOLS_WORD.search(template or ""))


def hermes_system_prompt(specs: list[ToolSpec], choice: ToolChoice | None = None) -> str:
    """The Hermes `<tools>` block for models whose template cannot show tools."""
    lines = "\n".join(json.dumps(s.openai(), ensure_ascii=False) for s in specs)
    text = ("# Tools\n\nYou may call one or more functions to help with the user's request. "
            "The functions are described as JSON inside <tools></tools>:\n"
            f"<tools>\n{lines}\n</tools>\n\n"
            "To call a function, write one JSON object per call inside <tool_call></tool_call> tags:\n"
            '<tool_call>\n{"name": <function-name>, "arguments": <arguments-object>}\n</tool_call>')
    if choice is not None and choice.mode == "function":
        text += f"\n\nCall the function {choice.name!r} now."
    elif choice is not None and choice.mode == "required":
        text += "\n\nCall at least one of the functions now."
    return text


def _text(content) -> str:
    """Text of a message content: a string, the text parts of a part list, else JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    return json.dumps(content, ensure_ascii=False)


def _call_text(c: dict) -> str:
    body = {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
    return f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"


def inline_tools(messages: list[dict], specs: list[ToolSpec], choice: ToolChoice | None = None) -> list[dict]:
    """Make a tool conversation renderable by a template that knows nothing of tools.

    Takes `prepare_messages` output. Adds the Hermes system prompt (when `specs`), writes
    assistant tool calls as `<tool_call>` text and tool results as a user turn of
    `<tool_response>` blocks (merged with a neighbouring user turn, since templates such
    as Gemma's insist on alternating roles).
    """
    out: list[dict] = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = "\n".join(_call_text(c) for c in m.pop("tool_calls"))
            before = _text(m.get("content"))
            m["content"] = f"{before}\n{calls}" if before else calls
        if m.get("role") == "tool":
            text = _text(m.get("content"))
            m = {"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>", "_tool": True}
        if out and m["role"] == "user" and out[-1]["role"] == "user" and (m.get("_tool") or out[-1].get("_tool")) \
                and isinstance(out[-1]["content"], str) and isinstance(m["content"], str):
            out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + m["content"], "_tool": True}
            continue
        out.append(m)
    out = [{k: v for k, v in m.items() if k != "_tool"} for m in out]
    if specs:
        prompt = hermes_system_prompt(specs, choice)
        if out and out[0].get("role") in ("system", "developer") and isinstance(out[0].get("content"), str):
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}" if out[0]["content"] else prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


