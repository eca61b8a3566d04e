"""Checking raw GBNF before llama.cpp sees it, in time linear in the grammar's size.

llama.cpp's parser accepts grammars its sampler cannot run: an empty language, left
recursion, a token or character no token of the vocabulary can produce. Its sampler then
throws a C++ exception across ctypes and the whole process aborts. `check_gbnf` parses a
grammar the way llama.cpp reads it and refuses those with `InvalidInput` naming the cause.

    check_gbnf(text)                  # syntax, rules, left recursion, can `root` finish
    check_gbnf(text, vocab=v)         # + token refs exist, and some path can be sampled

The analysis is a worklist fixpoint (each rule reference is visited once when its rule
becomes known) and an iterative depth-first search, so a 10,000-rule chain costs the same
whichever order its rules come in, and no Python recursion grows with the grammar. Groups
are parsed recursively, so nesting is bounded (MAX_NESTING). Pure Python, no native imports:
the vocabulary comes in through the small `GrammarVocab` protocol, which a runtime satisfies.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from inferd.chat.charset import MAX_CODEPOINT, CharSet
from inferd.errors import InvalidInput

# llama.cpp refuses larger repetition counts ("exceeds sane defaults"); we refuse them first.
MAX_REPETITIONS = 2000
MAX_NESTING = 100           # parenthesised groups inside each other
MAX_RULES = 20_000          # rules plus groups; each is a few hundred bytes of llama.cpp state
MAX_GRAMMAR_CHARS = 1 << 20

LIT, CLS, ANY, TOK, REF = range(5)


class GrammarVocab(Protocol):
    """What the check needs from a model's vocabulary (a runtime implements it)."""

    n_vocab: int

    def producible_ranges(self) -> tuple[tuple[int, int], ...]:
        """Code points some usable token's text contains, as inclusive ranges."""

    def token_usable(self, token: int) -> bool:
        """Whether a grammar can match this token: llama.cpp masks end-of-generation tokens
        until the grammar is complete and tokens whose text is empty or starts with NUL."""

    def token_id(self, text: str) -> int | None:
        """The one token `text` is (special tokens parsed), or None."""


@dataclass(slots=True)
class _Item:
    kind: int
    value: Any             # LIT: tuple of code points; CLS: CharSet; TOK: (negated, id | text); REF: rule index
    optional: bool
    pos: int


class _Parser:
    def __init__(self, text: str, param: str):
        self.s, self.param, self.pos = text, param, 0
        self.names: list[str] = []                 # index -> rule name (groups: their enclosing rule)
        self.index: dict[str, int] = {}            # rule name -> index
        self.alts: list[list[list[_Item]]] = []    # index -> alternatives
        self.defined: list[bool] = []
        self.refs: list[tuple[int, int]] = []      # (rule index, position) of every reference
        self.rule = ""
        self.depth = 0

    def fail(self, msg: str, pos: int | None = None) -> NoReturn:
        pos = self.pos if pos is None else pos
        line = self.s.count("\n", 0, pos) + 1
        col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
        near = self.s[pos:pos + 20].split("\n")[0]
        where = f" near {near!r}" if near else ""
        raise InvalidInput(f"invalid grammar: line {line}, column {col}: {msg}{where}", param=self.param)

    def _new(self, name: str) -> int:
        if len(self.alts) >= MAX_RULES:
            self.fail(f"more than {MAX_RULES} rules and groups")
        self.names.append(name)
        self.alts.append([])
        self.defined.append(False)
        return len(self.alts) - 1

    def _rule_index(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = self._new(name)
        return i

    # -- lexing
    def peek(self, k: int = 0) -> str:
        p = self.pos + k
        return self.s[p] if p < len(self.s) else ""

    def space(self, newline_ok: bool):
        s, n = self.s, len(self.s)
        while self.pos < n:
            c = s[self.pos]
            if c in " \t" or (newline_ok and c in "\r\n"):
                self.pos += 1
            elif c == "#":
                while self.pos < n and s[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                break

    @staticmethod
    def _word(c: str) -> bool:
        return c.isascii() and (c.isalnum() or c == "-")

    def name(self) -> str:
        start = self.pos
        while self.pos < len(self.s) and self._word(self.s[self.pos]):
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
        if self.pos - start > 9:
            self.fail(f"repetition counts above {MAX_REPETITIONS} are not allowed")
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

    # -- structure
    def grammar(self):
        if len(self.s) > MAX_GRAMMAR_CHARS:
            raise InvalidInput(f"invalid grammar: longer than {MAX_GRAMMAR_CHARS} characters", param=self.param)
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
            self.rule = name
            i = self._rule_index(name)
            self.defined[i] = True
            self.alts[i].extend(self.alternates(nested=False))
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
                cps = []
                while self.peek() != '"':
                    if not self.peek():
                        self.fail("unterminated string literal", start)
                    cps.append(self.char())
                self.pos += 1
                items.append(_Item(LIT, tuple(cps), not cps, start))
            elif c == "[":
                items.append(_Item(CLS, self.char_class(start), False, start))
            elif c == ".":
                self.pos += 1
                items.append(_Item(ANY, None, False, start))
            elif self._word(c):
                i = self._rule_index(self.name())
                self.refs.append((i, start))
                items.append(_Item(REF, i, False, start))
            elif c == "(":
                self.pos += 1
                self.depth += 1
                if self.depth > MAX_NESTING:
                    self.fail(f"groups nested more than {MAX_NESTING} deep", start)
                self.space(True)
                g = self._new(self.rule)
                self.defined[g] = True
                self.alts[g] = self.alternates(nested=True)
                if self.peek() != ")":
                    self.fail("expected ')'")
                self.pos += 1
                self.depth -= 1
                items.append(_Item(REF, g, False, start))
            elif c == "<" or (c == "!" and self.peek(1) == "<"):
                items.append(_Item(TOK, self.token_ref(start), False, start))
            elif c == "!":
                self.fail("'!' must be followed by a token reference like !<[123]>")
            elif c in "*+?{":
                if not items:
                    self.fail(f"'{c}' has no preceding item to repeat")
                if self.repetition() == 0:
                    items[-1].optional = True
            else:
                break
            self.space(nested)
        return items

    def char_class(self, start: int) -> CharSet:
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
        return chars

    def token_ref(self, start: int) -> tuple[bool, int | str]:
        negated = self.peek() == "!"
        if negated:
            self.pos += 1
        end = self.s.find(">", self.pos)
        if end < 0 or "\n" in self.s[self.pos:end]:
            self.fail("unterminated token reference '<...>'", start)
        body = self.s[self.pos + 1:end]
        ref: int | str
        if body.startswith("["):
            digits = body[1:-1]
            if not (body.endswith("]") and digits.isascii() and digits.isdigit()):
                self.fail("token id reference must look like <[123]>", start)
            ref = int(digits) if len(digits) < 12 else 1 << 40
        elif not body or any(ch.isspace() for ch in body):
            self.fail("token reference must name one token, like <|im_end|>", start)
        else:
            ref = self.s[self.pos:end + 1]  # llama.cpp looks the whole "<...>" up as one token
        self.pos = end + 1
        return negated, ref

    def repetition(self) -> int:
        """Parse one repetition operator; returns its minimum count."""
        c = self.peek()
        self.pos += 1
        if c in "*+?":
            return 0 if c in "*?" else 1
        self.space(False)
        lo = self.int_()
        self.space(False)
        hi: int | None = lo
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
        return lo


def _fixpoint(alts: list[list[list[_Item]]], term_ok) -> list[bool]:
    """Rules that can derive a string whose terminals all satisfy `term_ok` (a Horn-clause
    worklist: each alternative counts its unmet items; a rule becoming known decrements the
    alternatives that use it). Linear in the number of items."""
    n = len(alts)
    known = [False] * n
    users: list[list[int]] = [[] for _ in range(n)]
    owner: list[int] = []
    need: list[int] = []
    todo: list[int] = []
    for r, rule_alts in enumerate(alts):
        for alt in rule_alts:
            k, unmet = len(need), 0
            for it in alt:
                if it.optional:
                    continue
                if it.kind == REF:
                    users[it.value].append(k)  # type: ignore[index]
                    unmet += 1
                elif not term_ok(it):
                    unmet += 1 << 40  # never met
            owner.append(r)
            need.append(unmet)
            if unmet == 0 and not known[r]:
                known[r] = True
                todo.append(r)
    while todo:
        r = todo.pop()
        for k in users[r]:
            need[k] -= 1
            if need[k] == 0 and not known[owner[k]]:
                known[owner[k]] = True
                todo.append(owner[k])
    return known


def _left_cycle(p: _Parser, nullable: list[bool]) -> list[str] | None:
    """A left-recursive cycle as rule names, or None. Iterative DFS over left references."""
    graph: list[list[int]] = []
    for rule_alts in p.alts:
        out: list[int] = []
        for alt in rule_alts:
            for it in alt:
                if it.kind == REF:
                    out.append(it.value)  # type: ignore[arg-type]
                if not (it.optional or (it.kind == LIT and not it.value)
                        or (it.kind == REF and nullable[it.value])):  # type: ignore[index]
                    break
        graph.append(out)
    state = [0] * len(graph)  # 0 new, 1 on the stack, 2 done
    for start in range(len(graph)):
        if state[start]:
            continue
        stack = [(start, 0)]
        state[start] = 1
        while stack:
            node, i = stack[-1]
            if i < len(graph[node]):
                stack[-1] = (node, i + 1)
                m = graph[node][i]
                if state[m] == 1:
                    path = [n for n, _ in stack]
                    names = [p.names[n] for n in path[path.index(m):]] + [p.names[m]]
                    return [x for j, x in enumerate(names) if j == 0 or x != names[j - 1]]
                if state[m] == 0:
                    state[m] = 1
                    stack.append((m, 0))
            else:
                state[node] = 2
                stack.pop()
    return None


class _Producible:
    """Membership in the vocabulary's producible code points (bisect over range starts)."""

    def __init__(self, vocab: GrammarVocab):
        self.vocab = vocab
        self.chars = CharSet(vocab.producible_ranges())
        self.starts = [lo for lo, _ in self.chars.ranges]

    def has(self, cp: int) -> bool:
        i = bisect.bisect_right(self.starts, cp) - 1
        return i >= 0 and cp <= self.chars.ranges[i][1]


def check_gbnf(text: str, param: str = "grammar", vocab: GrammarVocab | None = None) -> str:
    """Validate a raw GBNF grammar; return it unchanged, or raise InvalidInput naming the problem.

    Checks syntax (as llama.cpp's parser reads it), undefined rules, a missing `root`,
    empty character classes, repetition bounds, nesting depth, left recursion, and that
    `root` can finish. With `vocab`: every token reference names a token of that
    vocabulary, and some way through the grammar uses only characters and tokens the
    vocabulary can produce (llama.cpp aborts the process when no token is allowed)."""
    if not isinstance(text, str):
        raise InvalidInput("grammar must be a string", param=param)
    p = _Parser(text, param)
    p.grammar()
    for i, pos in p.refs:
        if not p.defined[i]:
            p.fail(f"undefined rule '{p.names[i]}'", pos)
    if "root" not in p.index:
        raise InvalidInput("invalid grammar: it has no 'root' rule (sampling starts from 'root')", param=param)
    root = p.index["root"]

    def fail(msg: str) -> NoReturn:
        raise InvalidInput(f"invalid grammar: {msg}", param=param)

    nullable = _fixpoint(p.alts, lambda it: it.kind == LIT and not it.value)
    cycle = _left_cycle(p, nullable)
    if cycle:
        fail("left recursion: " + " -> ".join(cycle) + " (llama.cpp cannot sample left-recursive rules)")
    if not _fixpoint(p.alts, lambda it: True)[root]:
        fail("rule 'root' can never complete: every alternative recurses without end")
    if vocab is not None:
        _check_vocab(p, root, vocab, fail)
    return text


def _check_vocab(p: _Parser, root: int, vocab: GrammarVocab, fail) -> None:
    tokens: dict[int, tuple[bool, int | None]] = {}  # item position -> (negated, token id)
    for rule_alts in p.alts:
        for alt in rule_alts:
            for it in alt:
                if it.kind != TOK:
                    continue
                negated, ref = it.value  # type: ignore[misc]
                if isinstance(ref, int):
                    if ref >= vocab.n_vocab:
                        p.fail(f"token id {ref} is out of range for this model (vocabulary of {vocab.n_vocab})",
                               it.pos)
                    tid: int | None = ref
                else:
                    tid = vocab.token_id(ref)
                    if tid is None:
                        p.fail(f"{ref} is not a single token of this model's vocabulary", it.pos)
                tokens[it.pos] = (negated, tid)
    prod = _Producible(vocab)
    blocked: list[str] = []

    def ok(it: _Item) -> bool:
        if it.kind == LIT:
            bad = next((cp for cp in it.value if not prod.has(cp)), None)  # type: ignore[union-attr]
            if bad is not None:
                blocked.append(f"character {chr(bad)!r}")
            return bad is None
        if it.kind == CLS:
            good = bool(it.value & prod.chars)  # type: ignore[operator]
            if not good:
                blocked.append(f"class {p.s[it.pos:it.pos + 20].split(chr(10))[0]!r}")
            return good
        if it.kind == ANY:
            return bool(prod.chars)
        negated, tid = tokens[it.pos]
        if negated:
            return True
        good = vocab.token_usable(tid)  # type: ignore[arg-type]
        if not good:
            blocked.append(f"token <[{tid}]> (end-of-generation, empty or NUL text)")
        return good

    if not _fixpoint(p.alts, ok)[root]:
        seen = list(dict.fromkeys(blocked))[:3]
        fail("no way through this grammar can be sampled: every one needs something no token of this model "
             f"can produce ({', '.join(seen) or 'unknown'}); an end-of-generation token cannot be matched, "
             "generation ends by itself when the grammar is complete")
