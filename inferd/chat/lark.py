"""GBNF -> Lark, for runtimes whose constrained decoding takes llguidance's Lark grammars
(onnxruntime-genai's `set_guidance("lark_grammar", ...)`). The chat layer builds every
constraint (JSON schemas, strict tools, raw `grammar`) as GBNF (grammar.py); this converts
that text, so both runtimes enforce the very same language.

Rules become lowercase Lark rules (`a-kv` -> `g_a_kv`, the root is `start`); literals become
JSON-quoted strings; character classes become regexes whose endpoints are written as
`\\x{HEX}` code points, so no escape is read differently by the two dialects. A grammar this
cannot read is an InvalidInput naming `grammar` (a 400, never a silent drop)."""

from __future__ import annotations

import json
import re

from inferd.errors import InvalidInput

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_REPEAT = re.compile(r"\{\s*(\d*)\s*(,?)\s*(\d*)\s*\}")
_ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^",
        "/": "/", "0": "\0", "f": "\f", "b": "\b", "v": "\v", "a": "\a"}


def _bad(msg: str) -> InvalidInput:
    return InvalidInput(f"grammar: {msg}", "grammar")


def _escape(src: str, i: int) -> tuple[int, int]:
    """The code point of the escape at src[i] (just after the backslash) and the index after it."""
    c = src[i:i + 1]
    width = {"x": 2, "u": 4, "U": 8}.get(c)
    if width is not None:
        digits = src[i + 1:i + 1 + width]
        if len(digits) != width or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
            raise _bad(f"bad \\{c} escape at {i}")
        return int(digits, 16), i + 1 + width
    if c in _ESC:
        return ord(_ESC[c]), i + 1
    if not c:
        raise _bad("escape at the end of the grammar")
    return ord(c), i + 1


def _rule(name: str) -> str:
    return "g_" + name.lower().replace("-", "_")


def _cp(c: int) -> str:
    return "\\x{%X}" % c


def gbnf_to_lark(gbnf: str, root: str = "root") -> str:
    """The Lark grammar (llguidance dialect) of `gbnf`, started at rule `root`."""
    out: list[str] = []
    src = gbnf
    i, n = 0, len(src)
    rules: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    depth = 0

    def emit(tok: str) -> None:
        if current is None:
            raise _bad(f"text before the first rule at {i}")
        current.append(tok)

    while i < n:
        ch = src[i]
        if ch == "#":
            while i < n and src[i] != "\n":
                i += 1
            continue
        if ch.isspace():
            i += 1
            continue
        m = _NAME.match(src, i)
        if m is not None:
            j = m.end()
            k = j
            while k < n and src[k] in " \t":
                k += 1
            if src.startswith("::=", k) and depth == 0:  # a new rule
                current = []
                rules.append((m.group(), current))
                i = k + 3
                continue
            emit(_rule(m.group()))
            i = j
            continue
        if ch == '"':
            i += 1
            text = []
            while i < n and src[i] != '"':
                if src[i] == "\\":
                    c, i = _escape(src, i + 1)
                    text.append(chr(c))
                else:
                    text.append(src[i])
                    i += 1
            if i >= n:
                raise _bad("unterminated string")
            i += 1
            emit(json.dumps("".join(text), ensure_ascii=False) if text else '""')
            continue
        if ch == "[":
            i += 1
            neg = src.startswith("^", i)
            if neg:
                i += 1
            parts = []
            first = True
            while i < n and (src[i] != "]" or first):
                first = False
                if src[i] == "\\":
                    lo, i = _escape(src, i + 1)
                else:
                    lo, i = ord(src[i]), i + 1
                hi = lo
                if i + 1 < n and src[i] == "-" and src[i + 1] != "]":
                    if src[i + 1] == "\\":
                        hi, i = _escape(src, i + 2)
                    else:
                        hi, i = ord(src[i + 1]), i + 2
                if hi < lo:
                    raise _bad(f"character range out of order at {i}")
                parts.append(_cp(lo) if lo == hi else f"{_cp(lo)}-{_cp(hi)}")
            if i >= n:
                raise _bad("unterminated character class")
            i += 1
            emit("/[" + ("^" if neg else "") + "".join(parts) + "]/")
            continue
        if ch == ".":
            emit(r"/(?s:.)/")
            i += 1
            continue
        if ch in "()|*+?":
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth < 0:
                raise _bad(f"unbalanced ')' at {i}")
            emit(ch)
            i += 1
            continue
        if ch == "{":
            m2 = _REPEAT.match(src, i)
            if m2 is None:
                raise _bad(f"bad repetition at {i}")
            lo_s, comma, hi_s = m2.groups()
            lo = int(lo_s or 0)
            if not comma:
                emit("{%d}" % lo)
            elif hi_s:
                emit("{%d,%d}" % (lo, int(hi_s)))
            else:
                emit("{%d,}" % lo)
            i = m2.end()
            continue
        raise _bad(f"unexpected {ch!r} at {i}")
    if depth:
        raise _bad("unbalanced '('")
    names = {name for name, _ in rules}
    if root not in names:
        raise _bad(f"no rule named {root!r}")
    out.append(f"start: {_rule(root)}")
    for name, body in rules:
        if not body:
            raise _bad(f"rule {name!r} is empty")
        out.append(f"{_rule(name)}: " + " ".join(body))
    return "\n".join(out) + "\n"
