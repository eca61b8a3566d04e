"""GBNF, the grammar language llama.cpp samples under: writing it and checking it.

Writing: `literal()` and `char_class()` produce terminals that llama.cpp's parser reads back
exactly (every awkward code point is written as an escape), over `CharSet`s kept as sorted,
disjoint code-point ranges.

Checking: `check_gbnf()` parses a user's raw grammar the way llama.cpp does and reports the
first problem as `InvalidInput` naming the line, column and cause. It is stricter than
llama.cpp in exactly the places where llama.cpp does not fail cleanly: a grammar whose
language is empty (`[b-a]`, an unproductive root) makes llama.cpp's sampler throw a C++
exception that aborts the whole process mid-generation, and `{2,1}` makes its parser loop
while allocating. Those must be a 400, never a crash. Pure Python, no native imports.
"""

from __future__ import annotations

import re

from inferd.chat.charset import MAX_CODEPOINT, CharSet
from inferd.chat.grammar_check import check_gbnf as check_gbnf  # re-exported: gbnf's checking half


# ---------------------------------------------------------------------------------------
# character sets and terminals


# Code points a UTF-8 encoder can write (no surrogates): what "any character" may mean.
UNIVERSE = CharSet([(0, 0xD7FF), (0xE000, MAX_CODEPOINT)])
# Characters a JSON string may hold without an escape (RFC 8259: not '"', '\', or C0 controls).
JSON_PLAIN = UNIVERSE - CharSet([(0, 0x1F)]) - CharSet.of('"\\')

_SAFE_RAW = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$%&'()*+,-./:;<=>?@_`{|}~")


def _escape_cp(cp: int, raw_ok: set[str]) -> str:
    ch = chr(cp)
    if ch in raw_ok:
        return ch
    if ch in '"\\':
        return "\\" + ch
    if cp > 0x7F and cp not in (0x85, 0x2028, 0x2029) and ch.isprintable():
        return ch  # printable non-ASCII goes through as UTF-8, readable in logs
    if cp <= 0xFF:
        return f"\\x{cp:02X}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04X}"
    return f"\\U{cp:08X}"


def literal(text: str) -> str:
    """A GBNF string literal matching exactly `text`."""
    return '"' + "".join(_escape_cp(ord(c), _SAFE_RAW) for c in text) + '"'


def char_class(chars: CharSet) -> str:
    """A GBNF character class matching exactly `chars` (which must not be empty)."""
    if not chars:
        raise ValueError("empty character class")
    parts = []
    for lo, hi in chars.ranges:
        a = _escape_cp(lo, _SAFE_RAW - set("^-"))
        parts.append(a if lo == hi else f"{a}-{_escape_cp(hi, _SAFE_RAW - set('^-'))}")
    return "[" + "".join(parts) + "]"


# ---------------------------------------------------------------------------------------
# rule bodies


_TERMINALS = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|<[^>\n]*>')
_WORD = re.compile(r"[a-zA-Z0-9-]+")


def referenced_rules(body: str) -> set[str]:
    """Rule names a rule body refers to (literals, classes and token refs removed)."""
    stripped = _TERMINALS.sub(" ", body)
    stripped = re.sub(r"\{[0-9, ]*\}", " ", stripped)  # repetition counts are not names
    return set(_WORD.findall(stripped))


def prune(rules: dict[str, str], root: str = "root") -> dict[str, str]:
    """Only the rules reachable from `root`, in their original order."""
    keep, todo = set(), [root]
    while todo:
        n = todo.pop()
        if n in rules and n not in keep:
            keep.add(n)
            todo.extend(referenced_rules(rules[n]))
    return {k: v for k, v in rules.items() if k in keep}
