"""Ollama chat templates (Go text/template) -> Jinja chat templates, for the subset Ollama's
library uses: text, `{{ .Field.Path }}`, `{{ . }}`, `if / else if / else / end`, `range`
(over `.Messages`, `.Tools`, `.ToolCalls`, nested; `range $i, $_ := ...`), the
`$last := eq (len (slice $.Messages $i)) 1` idiom, `eq ne not and or len json`, `$.Root`
fields, and `{{-`/`-}}` whitespace trimming. Both kinds of
template are handled: `.Messages` ones (one pass over the conversation) and legacy
`.System`/`.Prompt`/`.Response` ones (rendered once per user turn, the last cut at
`.Response`, as Ollama does). Anything else raises Unsupported and the model keeps the
chat template of its GGUF; the raw template is still shown by /api/show."""

from __future__ import annotations

import re

_ACTION = re.compile(r"\{\{(-?)(.*?)(-?)\}\}", re.S)
_TOKEN = re.compile(r'\s*(\(|\)|"(?:[^"\\]|\\.)*"|`[^`]*`|-?\d+|\$?[A-Za-z_]\w*(?:\.\w+)*|\$?(?:\.\w+)+|\$|\.|:=|,)')
_ROOT = {"System": "ollama_system", "Messages": "messages", "Tools": "tools", "Prompt": "ollama_prompt",
         "Response": "ollama_response", "Think": "enable_thinking"}
_MSG = {"Thinking": "reasoning_content", "ToolCalls": "tool_calls"}   # else CamelCase -> snake_case
_LAST_IDIOM = re.compile(r"^\$(\w+)\s*:=\s*eq\s*\(\s*len\s*\(\s*slice\s+\$\.Messages\s+\$\w+\s*\)\s*\)\s*1$")


class Unsupported(ValueError):
    pass


def _lex(src: str) -> list[tuple[str, str]]:
    """[('text', s) | ('act', expr)], with Go's trim markers applied to the text."""
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _ACTION.finditer(src):
        text = src[pos:m.start()]
        if m.group(1):
            text = text.rstrip()
        if out and out[-1][0] == "trim":
            out.pop()
            text = text.lstrip()
        out.append(("text", text))
        body = m.group(2).strip()
        if not body.startswith("/*"):
            out.append(("act", body))
        if m.group(3):
            out.append(("trim", ""))
        pos = m.end()
    text = src[pos:]
    if out and out[-1][0] == "trim":
        out.pop()
        text = text.lstrip()
    out.append(("text", text))
    return [t for t in out if t != ("text", "")]


def _snake(name: str) -> str:
    return _MSG.get(name) or re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class _Expr:
    """One Go template expression -> Jinja. `scope` is the variable of the innermost range
    (what `.` means there), None at the root."""

    def __init__(self, src: str, scope: str | None, vars_: dict[str, str]):
        self.toks = [t for t in _TOKEN.findall(src)]
        if "".join(self.toks).replace(" ", "") != src.replace(" ", "").replace("\n", "").replace("\t", ""):
            raise Unsupported(f"cannot read template action {src!r}")
        self.i, self.scope, self.vars = 0, scope, vars_

    def parse(self) -> str:
        out = self._command()
        if self.i != len(self.toks):
            raise Unsupported(f"unexpected {self.toks[self.i]!r}")
        return out

    def _command(self) -> str:
        head = self.toks[self.i]
        funcs = {"eq": "==", "ne": "!="}
        if head in ("eq", "ne", "and", "or", "not", "len", "json"):
            self.i += 1
            args = []
            while self.i < len(self.toks) and self.toks[self.i] != ")":
                args.append(self._term())
            if head in funcs:
                if len(args) != 2:
                    raise Unsupported(f"{head} with {len(args)} arguments")
                return f"({args[0]} {funcs[head]} {args[1]})"
            if head == "not" and len(args) == 1:
                return f"(not {args[0]})"
            if head == "len" and len(args) == 1:
                return f"({args[0]} | length)"
            if head == "json" and len(args) == 1:
                return f"({args[0]} | tojson)"
            if head in ("and", "or") and args:
                return "(" + f" {head} ".join(args) + ")"
            raise Unsupported(f"{head} with {len(args)} arguments")
        return self._term()

    def _term(self) -> str:
        t = self.toks[self.i]
        self.i += 1
        if t == "(":
            inner = self._command()
            if self.i >= len(self.toks) or self.toks[self.i] != ")":
                raise Unsupported("unbalanced parentheses")
            self.i += 1
            return inner
        if t[0] in "\"`":
            body = t[1:-1] if t[0] == "`" else bytes(t[1:-1], "utf-8").decode("unicode_escape")
            return repr(body)
        if re.fullmatch(r"-?\d+", t):
            return t
        if t in ("true", "false"):
            return t
        return self._field(t)

    def _field(self, t: str) -> str:
        if t == ".":
            if self.scope is None:
                raise Unsupported("'.' at the top level")
            return self.scope
        if t.startswith("$."):
            head, *rest = t[2:].split(".")
            base = self._root(head, t)
        elif t.startswith("$"):
            name, *rest = t[1:].split(".")
            if name not in self.vars:
                raise Unsupported(f"variable {t}")
            base = self.vars[name]
        elif t.startswith("."):
            head, *rest = t[1:].split(".")
            base = f"{self.scope}.{_snake(head)}" if self.scope else self._root(head, t)
        else:
            raise Unsupported(f"function {t!r}")
        return ".".join([base, *(_snake(r) for r in rest)])

    @staticmethod
    def _root(head: str, t: str) -> str:
        if head not in _ROOT:
            raise Unsupported(f"field {t}")
        return _ROOT[head]


def _tag(inner: str) -> str:
    # `+` on both sides: inferd compiles chat templates with trim_blocks and lstrip_blocks,
    # which would eat the newlines Go keeps around actions.
    return "{%+ " + inner + " +%}"


def _text(s: str) -> str:
    if "{{" in s or "{%" in s or "{#" in s:  # literal text that Jinja would read as syntax
        return "{{ " + repr(s) + " }}"
    return s


def _translate(tokens: list[tuple[str, str]], legacy: bool = False) -> str:
    out: list[str] = []
    stack: list[str] = []          # "if" or the loop variable of a range
    vars_: dict[str, str] = {}
    for kind, body in tokens:
        if kind == "text":
            out.append(_text(body))
            continue
        loops = [x for x in stack if x != "if"]
        scope = loops[-1] if loops else None
        if legacy and body in (".System", "$.System"):
            body = "$sys_turn"
            vars_["sys_turn"] = "ollama_sys_turn"
        if legacy and body.startswith("if") and ".System" in body:
            body = body.replace("$.System", "$sys_turn").replace(".System", "$sys_turn")
            vars_["sys_turn"] = "ollama_sys_turn"
        word = body.split(None, 1)[0] if body else ""
        rest = body[len(word):].strip()
        if word == "if":
            stack.append("if")
            out.append(_tag("if " + _Expr(rest, scope, vars_).parse()))
        elif word == "else" and rest.startswith("if "):
            out.append(_tag("elif " + _Expr(rest[3:], scope, vars_).parse()))
        elif word == "else" and not rest:
            out.append(_tag("else"))
        elif word == "end":
            if not stack:
                raise Unsupported("unbalanced {{ end }}")
            out.append(_tag("endif" if stack.pop() == "if" else "endfor"))
        elif word == "range":
            m = re.fullmatch(r"(?:\$(\w+)\s*,\s*\$\w+\s*:=\s*)?(.+)", rest, re.S)
            if not m:
                raise Unsupported(f"range over {rest!r}")
            var = f"it{len(loops)}"
            out.append(_tag(f"for {var} in " + _Expr(m.group(2), scope, vars_).parse()))
            if m.group(1):
                vars_[m.group(1)] = f"i{len(loops)}"
                out.append(_tag(f"set i{len(loops)} = loop.index0"))
            stack.append(var)
        elif (m2 := _LAST_IDIOM.match(body)) and scope:
            vars_[m2.group(1)] = f"last{len(loops) - 1}"
            out.append(_tag(f"set last{len(loops) - 1} = loop.last"))
        elif word.startswith(("$", ".", "(", '"')) or word in ("eq", "ne", "not", "and", "or", "len", "json"):
            out.append("{{ _go(" + _Expr(body, scope, vars_).parse() + ") }}")
        else:
            raise Unsupported(f"template action {body!r}")
    if stack:
        raise Unsupported("unclosed block")
    return "".join(out)


# `_go(x)` prints a value as Go's template prints Ollama's types: maps and lists (a tool's
# function, a call's arguments) as JSON, nothing for a missing value.
_PRELUDE = ("{%- macro _go(x) -%}{%- if x is none or x is undefined -%}{%- elif x is mapping or "
            "(x is iterable and x is not string) -%}{{ x | tojson }}{%- else -%}{{ x }}{%- endif -%}"
            "{%- endmacro -%}"
            "{%- set ns = namespace(sys=[]) -%}{%- for x in messages if x.role == 'system' -%}"
            "{%- set ns.sys = ns.sys + [x.content] -%}{%- endfor -%}"
            "{%- set ollama_system = ns.sys | join('\\n\\n') +%}")


def to_jinja(go: str) -> str:
    """The Jinja equivalent of an Ollama template; raises Unsupported."""
    tokens = _lex(go)
    acts = " ".join(b for k, b in tokens if k == "act")
    if ".Messages" in acts:
        return _PRELUDE + _translate(tokens)
    # Legacy: once per user turn with .Prompt, .Response (the next assistant message) and
    # .System (first turn only); the turn being generated stops at .Response.
    cut = next((i for i, (k, b) in enumerate(tokens) if k == "act" and b == ".Response"), None)
    full = _translate(tokens, legacy=True)
    head = _translate(tokens[:cut], legacy=True) if cut is not None else full
    return (_PRELUDE + "{%- set turns = messages | rejectattr('role', 'equalto', 'system') | list -%}"
            "{%- for t in turns -%}{%- if t.role == 'user' -%}"
            "{%- set nxt = turns[loop.index0 + 1] if loop.index0 + 1 < turns | length else none -%}"
            "{%- set ollama_prompt = t.content -%}"
            "{%- set ollama_sys_turn = ollama_system if loop.first else '' -%}"
            "{%- if nxt is not none and nxt.role == 'assistant' -%}{%- set ollama_response = nxt.content +%}"
            + full + "{%+ else -%}{%- set ollama_response = '' +%}" + head + "{%+ endif -%}"
            "{%- endif -%}{%- endfor -%}")
