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
from dataclasses import dataclass, field

from inferd.errors import InvalidInput

MAX_CODEPOINT = 0x10FFFF
# llama.cpp refuses larger repetition counts ("exceeds sane defaults"); we refuse them first.
MAX_REPETITIONS = 2000


# ---------------------------------------------------------------------------------------
# character sets and terminals


class CharSet:
    """An immutable set of code points as sorted, disjoint, non-adjacent inclusive ranges."""

    __slots__ = ("ranges",)

    def __init__(self, ranges=()):
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted((int(a), int(b)) for a, b in ranges if a <= b):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self.ranges = tuple(merged)

    @classmethod
    def of(cls, chars: str) -> CharSet:
        return cls((ord(c), ord(c)) for c in chars)

    def __or__(self, other: CharSet) -> CharSet:
        return CharSet(self.ranges + other.ranges)

    def __and__(self, other: CharSet) -> CharSet:
        out, i, j = [], 0, 0
        a, b = self.ranges, other.ranges
        while i < len(a) and j < len(b):
            lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
            if lo <= hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return CharSet(out)

    def complement(self, universe: CharSet | None = None) -> CharSet:
        out, start = [], 0
        for lo, hi in self.ranges:
            if lo > start:
                out.append((start, lo - 1))
            start = hi + 1
        if start <= MAX_CODEPOINT:
            out.append((start, MAX_CODEPOINT))
        result = CharSet(out)
        return result & universe if universe is not None else result

    def __sub__(self, other: CharSet) -> CharSet:
        return self & other.complement()

    def __contains__(self, cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __eq__(self, other) -> bool:
        return isinstance(other, CharSet) and self.ranges == other.ranges

    def __hash__(self) -> int:
        return hash(self.ranges)

    def __repr__(self) -> str:
        return f"CharSet({list(self.ranges)!r})"


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
# checking raw grammars


@dataclass
class _Item:
    """One element of a sequence after parsing: a terminal, a rule reference, or a group."""

    kind: str  # "term" | "ref" | "group"
    nullable: bool = False  # terminals only: matches the empty string
    ref: str = ""
    alts: list[list[_Item]] = field(default_factory=list)
    min: int = 1  # repetition bounds; max None = unbounded
    max: int | None = 1


class _Parser:
    def __init__(self, text: str, param: str):
        self.s, self.param, self.pos = text, param, 0
        self.rules: dict[str, list[list[_Item]]] = {}
        self.refs: list[tuple[str, int]] = []  # (name, position) for undefined-rule errors

    # -- errors
    def fail(self, msg: str, pos: int | None = None):
        pos = self.pos if pos is None else pos
        line = self.s.count("\n", 0, pos) + 1
        col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
        near = self.s[pos:pos + 20].split("\n")[0]
        where = f" near {near!r}" if near else ""
        raise InvalidInput(f"invalid grammar: line {line}, column {col}: {msg}{where}", param=self.param)

    # -- lexing
    def peek(self, k: int = 0) -> str:
        p = self.pos + k
        return self.s[p] if p < len(self.s) else ""

    def space(self, newline_ok: bool):
        s = self.s
        while self.pos < len(s):
            c = s[self.pos]
            if c in " \t" or (newline_ok and c in "\r\n"):
                self.pos += 1
            elif c == "#":
                while self.pos < len(s) and s[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                break

    def name(self) -> str:
        start = self.pos
        while self.pos < len(self.s) and (self.s[self.pos].isascii() and (self.s[self.pos].isalnum() or self.s[self.pos] == "-")):
            self.pos += 1
        if self.pos == start:
            self.fail("expected a rule name")
        return self.s[start:self.pos]

    def int_(self) -> int:
        start = self.pos
        while self.peek().isdigit() and self.peek().isascii():
            self.pos += 1
        if self.pos == start:
            self.fail("expected an integer")
        return int(self.s[start:self.pos])

    def char(self) -> int:
        """One possibly escaped character of a literal or class; returns its code point."""
        c = self.peek()
        if not c:
            self.fail("unexpected end of the grammar")
        if c != "\\":
            self.pos += 1
            return ord(c)
        esc = self.peek(1)
        widths = {"x": 2, "u": 4, "U": 8}
        if esc in widths:
            digits = self.s[self.pos + 2:self.pos + 2 + widths[esc]]
            if len(digits) != widths[esc] or any(d not in "0123456789abcdefABCDEF" for d in digits):
                self.fail(f"\\{esc} needs {widths[esc]} hex digits")
            cp = int(digits, 16)
            if cp > MAX_CODEPOINT:
                self.fail(f"code point {digits} is beyond U+10FFFF")
            self.pos += 2 + widths[esc]
            return cp
        simple = {"t": 9, "n": 10, "r": 13, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
        if esc in simple:
            self.pos += 2
            return simple[esc]
        self.fail(f"unknown escape '\\{esc}' (allowed: \\x \\u \\U \\t \\n \\r \\\\ \\\" \\[ \\] \\-)")

    # -- grammar structure
    def grammar(self):
        self.space(True)
        if self.pos >= len(self.s):
            self.fail("the grammar is empty")
        while self.pos < len(self.s):
            name = self.name()
            self.space(False)
            if not self.s.startswith("::=", self.pos):
                self.fail(f"expected '::=' after rule name '{name}'")
            self.pos += 3
            self.space(True)
            alts = self.alternates(nested=False)
            self.rules.setdefault(name, []).extend(alts)
            if self.pos < len(self.s) and self.peek() not in "\r\n":
                self.fail("expected a newline or the end of the grammar")
            self.space(True)

    def alternates(self, nested: bool) -> list[list[_Item]]:
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested: bool) -> list[_Item]:
        items: list[_Item] = []
        while self.pos < len(self.s):
            c, start = self.peek(), self.pos
            if c == '"':
                self.pos += 1
                n = 0
                while self.peek() != '"':
                    if not self.peek():
                        self.fail("unterminated string literal", start)
                    self.char()
                    n += 1
                self.pos += 1
                items.append(_Item("term", nullable=n == 0))
            elif c == "[":
                items.append(self.char_class_item(start))
            elif c == ".":
                self.pos += 1
                items.append(_Item("term"))
            elif c.isascii() and (c.isalnum() or c == "-"):
                name = self.name()
                self.refs.append((name, start))
                items.append(_Item("ref", ref=name))
            elif c == "(":
                self.pos += 1
                self.space(True)
                alts = self.alternates(nested=True)
                if self.peek() != ")":
                    self.fail("expected ')'")
                self.pos += 1
                items.append(_Item("group", alts=alts))
            elif c == "<" or (c == "!" and self.peek(1) == "<"):
                self.token_ref(start)
                items.append(_Item("term"))
            elif c == "!":
                self.fail("'!' must be followed by a token reference like !<[123]>")
            elif c in "*+?{":
                if not items:
                    self.fail(f"'{c}' has no preceding item to repeat")
                self.repetition(items[-1])
            else:
                break
            self.space(nested)
        return items

    def char_class_item(self, start: int) -> _Item:
        self.pos += 1
        negate = self.peek() == "^"
        if negate:
            self.pos += 1
        ranges = []
        while self.peek() != "]":
            if not self.peek():
                self.fail("unterminated character class", start)
            lo = self.char()
            hi = lo
            if self.peek() == "-" and self.peek(1) != "]":
                self.pos += 1
                if not self.peek():
                    self.fail("unterminated character class", start)
                hi = self.char()
                if hi < lo:
                    self.fail(f"character range {chr(lo)!r}-{chr(hi)!r} is empty (end before start)", start)
            ranges.append((lo, hi))
        self.pos += 1
        chars = CharSet(ranges)
        if negate:
            chars = chars.complement()
        if not chars:
            self.fail("character class matches no character", start)
        return _Item("term")

    def token_ref(self, start: int):
        if self.peek() == "!":
            self.pos += 1
        end = self.s.find(">", self.pos)
        if end < 0 or "\n" in self.s[self.pos:end]:
            self.fail("unterminated token reference '<...>'", start)
        body = self.s[self.pos + 1:end]
        if body.startswith("["):
            if not (body.endswith("]") and body[1:-1].isdigit()):
                self.fail("token id reference must look like <[123]>", start)
        elif not body or any(ch.isspace() for ch in body):
            self.fail("token reference must name one token, like <|im_end|>", start)
        self.pos = end + 1

    def repetition(self, item: _Item):
        c = self.peek()
        self.pos += 1
        if c in "*+?":
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        else:
            self.space(False)
            lo = self.int_()
            self.space(False)
            hi = lo
            if self.peek() == ",":
                self.pos += 1
                self.space(False)
                hi = self.int_() if self.peek().isdigit() else None
                self.space(False)
            if self.peek() != "}":
                self.fail("expected '}' to close the repetition")
            self.pos += 1
            if hi is not None and hi < lo:
                self.fail(f"repetition {{{lo},{hi}}} has its maximum below its minimum")
            if lo > MAX_REPETITIONS or (hi or 0) > MAX_REPETITIONS:
                self.fail(f"repetition counts above {MAX_REPETITIONS} are not allowed")
        # Repeating a repeated item composes; only the nullability/productivity matters below.
        if item.min != 1 or item.max != 1:
            item.alts, item.kind, item.ref = [[_Item(item.kind, item.nullable, item.ref, item.alts, item.min, item.max)]], "group", ""
        item.min, item.max = lo, hi


def _analyse(rules: dict[str, list[list[_Item]]], fail):
    """Nullable and productive rules by fixpoint; then left recursion and an empty root."""
    nullable: set[str] = set()
    productive: set[str] = set()

    def item_ok(it: _Item, known: set[str], want_null: bool) -> bool:
        if it.min == 0:
            return True
        if it.kind == "term":
            return it.nullable if want_null else True
        if it.kind == "ref":
            return it.ref in known
        return any(all(item_ok(x, known, want_null) for x in alt) for alt in it.alts)

    for known, want_null in ((nullable, True), (productive, False)):
        changed = True
        while changed:
            changed = False
            for name, alts in rules.items():
                if name not in known and any(all(item_ok(x, known, want_null) for x in a) for a in alts):
                    known.add(name)
                    changed = True

    def left_refs(alts) -> set[str]:
        out: set[str] = set()
        for alt in alts:
            for it in alt:
                if it.kind == "ref":
                    out.add(it.ref)
                elif it.kind == "group":
                    out |= left_refs(it.alts)
                if not item_ok(it, nullable, True):
                    break
        return out

    graph = {name: left_refs(alts) for name, alts in rules.items()}
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]):
        state[n] = 1
        for m in graph.get(n, ()):
            if state.get(m) == 1:
                cycle = path[path.index(m):] + [m] if m in path else [n, m]
                fail("left recursion: " + " -> ".join(cycle) + " (llama.cpp cannot sample left-recursive rules)")
            if m not in state:
                visit(m, path + [m])
        state[n] = 2

    for n in rules:
        if n not in state:
            visit(n, [n])
    if "root" not in productive:
        fail("rule 'root' can never complete: every alternative recurses without end")


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


def check_gbnf(text: str, param: str = "grammar") -> str:
    """Validate a raw GBNF grammar; return it unchanged, or raise InvalidInput naming the problem.

    Checks syntax (as llama.cpp's parser reads it), undefined rules, a missing `root`,
    empty character classes, repetition bounds, left recursion, and that `root` can finish.
    """
    if not isinstance(text, str):
        raise InvalidInput("grammar must be a string", param=param)
    p = _Parser(text, param)
    p.grammar()
    for name, pos in p.refs:
        if name not in p.rules:
            p.fail(f"undefined rule '{name}'", pos)
    if "root" not in p.rules:
        raise InvalidInput("invalid grammar: it has no 'root' rule (sampling starts from 'root')", param=param)

    def fail(msg: str):
        raise InvalidInput(f"invalid grammar: {msg}", param=param)

    _analyse(p.rules, fail)
    return text
