"""Streaming text against markers (stop strings, reasoning tags, tool-call tags): how much
of a buffer's end must be held back because the next delta may complete a marker."""

from __future__ import annotations

from collections.abc import Iterable


def held_suffix_len(buf: str, markers: Iterable[str]) -> int:
    """Length of the longest end of `buf` that is a proper prefix of one of `markers`."""
    best = 0
    for m in markers:
        for n in range(min(len(m) - 1, len(buf)), best, -1):
            if buf.endswith(m[:n]):
                best = n
                break
    return best
