"""CharSet: sets of Unicode code points as sorted, disjoint inclusive ranges, shared by the
GBNF writer (gbnf.py) and the GBNF checker (grammar_check.py). Pure Python."""

from __future__ import annotations

MAX_CODEPOINT = 0x10FFFF


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
