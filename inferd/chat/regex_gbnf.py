"""A JSON Schema `pattern` (a regular expression) -> the GBNF of the JSON string body.

The grammar writes *JSON-encoded* text, while the pattern constrains the *decoded* string,
so every character a pattern allows is emitted in its JSON form: `"` as `\\"`, a newline as
`\\n`, and so on. JSON Schema patterns are unanchored searches: a side without `^`/`$`
gets any characters there.

Supported: literals, escapes (\\d \\w \\s and negations, \\t \\n \\r \\f \\v, \\xHH,
\\uHHHH, escaped metacharacters), `.`, classes with ranges and negation, groups `(...)`
and `(?:...)`, alternation, quantifiers `? * + {n} {n,} {n,m}` (lazy `?` accepted).
Refused with a ValueError (the caller names the field): lookaround, backreferences, word
boundaries, anchors inside groups, named/flag groups, `\\p{...}`.

Shorthand classes are generated as their ASCII members only: Python's `\\d`, `\\w`, `\\s`
also match other scripts, so their *negations* are limited to printable ASCII to stay a
subset of what `re` accepts.
"""

from __future__ import annotations

import json

from inferd.chat.gbnf import JSON_PLAIN, UNIVERSE, CharSet, char_class, literal

DIGIT = CharSet([(48, 57)])
WORD = CharSet([(48, 57), (65, 90), (97, 122), (95, 95)])
SPACE = CharSet.of(" \t\n\r\f\v")
ASCII_PRINTABLE = CharSet([(0x20, 0x7E)])
_SHORT = {"d": (DIGIT, False), "D": (DIGIT, True), "w": (WORD, False), "W": (WORD, True),
          "s": (SPACE, False), "S": (SPACE, True)}
_SIMPLE = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
_MAX_REP = 2000
MAX_GROUP_DEPTH = 64  # the GBNF it becomes nests one group per level (the checker allows 100)


def charset_gbnf(chars: CharSet) -> str:
    """GBNF for one character of `chars`, written as it appears inside a JSON string."""
    alts = []
    plain = chars & JSON_PLAIN
    if plain:
        alts.append(char_class(plain))
    for lo, hi in (chars - JSON_PLAIN).ranges:
        for cp in range(lo, hi + 1):  # '"', '\' and C0 controls: at most 34 code points
            alts.append(literal(json.dumps(chr(cp))[1:-1]))
    if not alts:
        raise ValueError("a character class matches no character")
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def _text_gbnf(text: str) -> str:
    return literal(json.dumps(text, ensure_ascii=False)[1:-1])


class _Parser:
    def __init__(self, pattern: str):
        self.p, self.i = pattern, 0
        self.depth = 0  # groups open here; each is parsed recursively and nests in the grammar

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def take(self) -> str:
        c = self.peek()
        self.i += 1
        return c

    def top(self, any_char: str) -> str:
        """The whole pattern: top-level branches, each with its own anchors."""
        branches = []
        while True:
            start_anchor = self.peek() == "^"
            if start_anchor:
                self.i += 1
            seq, end_anchor = self.sequence(top=True)
            parts = ([] if start_anchor else [f"{any_char}*"]) + ([seq] if seq else []) + ([] if end_anchor else [f"{any_char}*"])
            branches.append(" ".join(parts) if parts else '""')
            if self.peek() != "|":
                break
            self.i += 1
        if self.i != len(self.p):
            raise ValueError(f"unbalanced ')' at position {self.i}")
        return " | ".join(f"( {b} )" for b in branches) if len(branches) > 1 else branches[0]

    def alternation(self) -> str:
        alts = [self.sequence(top=False)[0]]
        while self.peek() == "|":
            self.i += 1
            alts.append(self.sequence(top=False)[0])
        return " | ".join(a or '""' for a in alts)

    def sequence(self, top: bool) -> tuple[str, bool]:
        items: list[str] = []
        lits: list[str] = []  # a run of plain characters becomes one literal

        def flush():
            if lits:
                items.append(_text_gbnf("".join(lits)))
                lits.clear()

        while self.i < len(self.p):
            c = self.peek()
            if c in "|)":
                break
            if c == "$":
                self.i += 1
                if top and (self.i == len(self.p) or self.peek() == "|"):
                    flush()
                    return " ".join(items), True
                raise ValueError("'$' is only supported at the end of the pattern")
            if c == "^":
                raise ValueError("'^' is only supported at the start of the pattern")
            atom, is_char = self.atom()
            q = self.quantifier()
            if q is None and is_char is not None:
                lits.append(is_char)
                continue
            flush()
            items.append(atom + (q or ""))
        flush()
        return " ".join(items), False

    def atom(self) -> tuple[str, str | None]:
        """(GBNF, the plain character if the atom is exactly one literal character)."""
        if self.peek() == "{" and self._is_counted():
            raise ValueError(f"nothing to repeat before '{{' at position {self.i}")
        c = self.take()
        if c == "(":
            self.depth += 1
            if self.depth > MAX_GROUP_DEPTH:
                raise ValueError(f"groups nested more than {MAX_GROUP_DEPTH} deep")
            if self.peek() == "?":
                if self.p[self.i:self.i + 2] != "?:":
                    raise ValueError("lookaround and named or flag groups are not supported")
                self.i += 2
            inner = self.alternation()
            if self.take() != ")":
                raise ValueError("missing ')'")
            self.depth -= 1
            return f"({inner})", None
        if c == "[":
            return charset_gbnf(self.char_class()), None
        if c == ".":
            return charset_gbnf(UNIVERSE - CharSet.of("\n")), None
        if c in "*+?":
            raise ValueError(f"nothing to repeat before '{c}' at position {self.i - 1}")
        if c == "\\":
            chars, ch = self.escape()
            return (charset_gbnf(chars), None) if ch is None else (_text_gbnf(ch), ch)
        return _text_gbnf(c), c

    def escape(self) -> tuple[CharSet, str | None]:
        c = self.take()
        if not c:
            raise ValueError("the pattern ends with a lone backslash")
        if c in _SHORT:
            base, negate = _SHORT[c]
            return (ASCII_PRINTABLE - base if negate else base), None
        if c in _SIMPLE:
            return CharSet.of(_SIMPLE[c]), _SIMPLE[c]
        if c in "xu":
            n = 2 if c == "x" else 4
            digits = self.p[self.i:self.i + n]
            if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"\\{c} needs {n} hex digits")
            self.i += n
            ch = chr(int(digits, 16))
            return CharSet.of(ch), ch
        if c.isalnum():
            raise ValueError(f"the escape '\\{c}' is not supported (no backreferences, \\b, \\p{{}})")
        return CharSet.of(c), c

    def char_class(self) -> CharSet:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        chars, shorthand, first = CharSet(), False, True
        while True:
            c = self.peek()
            if not c:
                raise ValueError("missing ']'")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            self.i += 1
            if c == "\\":
                got, ch = self.escape()
                if ch is None:
                    chars, shorthand = chars | got, True
                    continue
                lo = ord(ch)
            else:
                lo = ord(c)
            if self.peek() == "-" and self.p[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1
                h = self.take()
                if h == "\\":
                    got, ch = self.escape()
                    if ch is None:
                        raise ValueError("a range cannot end in a class shorthand")
                    h = ch
                if ord(h) < lo:
                    raise ValueError(f"bad character range {chr(lo)}-{h}")
                chars = chars | CharSet([(lo, ord(h))])
            else:
                chars = chars | CharSet([(lo, lo)])
        if negate:  # see module docstring: shorthands make Python's complement Unicode-aware
            chars = chars.complement(ASCII_PRINTABLE if shorthand else UNIVERSE)
        return chars & UNIVERSE

    def quantifier(self) -> str | None:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            q = c
        elif c == "{" and self._is_counted():
            self.i += 1
            body = self.p[self.i:self.p.index("}", self.i)]
            self.i += len(body) + 1
            lo_s, _, hi_s = body.partition(",")
            lo = int(lo_s or 0)
            hi = lo if "," not in body else (int(hi_s) if hi_s else None)
            if hi is not None and hi < lo:
                raise ValueError(f"bad repetition {{{body}}}")
            if lo > _MAX_REP or (hi or 0) > _MAX_REP:
                raise ValueError(f"repetition counts above {_MAX_REP} are not supported")
            q = f"{{{lo},{'' if hi is None else hi}}}" if "," in body else f"{{{lo}}}"
        else:
            return None
        if self.peek() == "?":  # lazy: same language
            self.i += 1
        elif self.peek() == "+":
            raise ValueError("possessive quantifiers are not supported")
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._is_counted()):
            raise ValueError("a quantifier cannot follow a quantifier")
        return q

    def _is_counted(self) -> bool:
        end = self.p.find("}", self.i)
        body = self.p[self.i + 1:end] if end > 0 else ""
        return bool(body) and all(ch.isdigit() or ch == "," for ch in body) and body.count(",") <= 1 and body[0] != ","


def pattern_to_gbnf(pattern: str, any_char: str) -> str:
    """GBNF for the body of a JSON string whose decoded value matches `pattern` (re.search).

    `any_char` is the rule name for one JSON string character (used for unanchored sides).
    Raises ValueError with a short reason for unsupported or malformed patterns.
    """
    return _Parser(pattern).top(any_char)
