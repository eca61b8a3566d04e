"""The built-in `fixed` chunker: token windows with overlap along a separator hierarchy.

Tokens here are words and punctuation marks (`\\w+|[^\\w\\s]`): a model-free count that is
close to what subword tokenizers give for prose, and deterministic. Offsets are character
indexes into the original text, so `text[start_char:end_char] == chunk.text`."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from inferd.errors import InvalidInput

_TOKEN = re.compile(r"\w+|[^\w\s]")
FALLBACK_SEPARATORS = ("\n", ". ", " ")


@dataclass(frozen=True)
class FixedConfig:
    target_tokens: int = 500
    overlap_tokens: int = 50
    separator: str = "\n\n"
    max_chunks: int = 50

    def check(self) -> None:
        if self.target_tokens < 1:
            raise InvalidInput("target_tokens must be at least 1", "config.text.target_tokens")
        if self.overlap_tokens < 0:
            raise InvalidInput("overlap_tokens must not be negative", "config.text.overlap_tokens")
        if self.overlap_tokens >= self.target_tokens:
            raise InvalidInput(f"overlap_tokens ({self.overlap_tokens}) must be smaller than target_tokens "
                               f"({self.target_tokens})", "config.text.overlap_tokens")
        if self.max_chunks < 1:
            raise InvalidInput("max_chunks must be at least 1", "config.max_chunks")


@dataclass(frozen=True)
class Chunk:
    text: str
    start_char: int
    end_char: int


class _Tokens:
    def __init__(self, text: str):
        spans = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
        self.starts = [s for s, _ in spans]
        self.ends = [e for _, e in spans]

    def __len__(self) -> int:
        return len(self.starts)

    def count(self, a: int, b: int) -> int:
        """Tokens starting in [a, b)."""
        return bisect.bisect_left(self.starts, b) - bisect.bisect_left(self.starts, a)

    def index_at(self, a: int) -> int:
        return bisect.bisect_left(self.starts, a)


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def _split(text: str, a: int, b: int, seps: tuple[str, ...], toks: _Tokens, target: int) -> list[tuple[int, int]]:
    """Cut [a, b) into pieces of at most `target` tokens, preferring the earliest separator."""
    if toks.count(a, b) <= target:
        return [(a, b)]
    for i, sep in enumerate(seps):
        if sep and text.find(sep, a, b) != -1:
            pieces, cur = [], a
            while (j := text.find(sep, cur, b)) != -1:
                pieces.append((cur, j + len(sep)))  # the separator stays with the piece before it
                cur = j + len(sep)
            if cur < b:
                pieces.append((cur, b))
            out: list[tuple[int, int]] = []
            for pa, pb in pieces:
                out += _split(text, pa, pb, seps[i + 1:], toks, target)
            return out
    # No separator left: hard windows of `target` tokens.
    first, last = toks.index_at(a), toks.index_at(b)
    cuts = [a] + [toks.starts[k] for k in range(first + target, last, target)] + [b]
    return list(zip(cuts, cuts[1:]))


def _trim(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def fixed_chunks(text: str, cfg: FixedConfig) -> list[Chunk]:
    cfg.check()
    toks = _Tokens(text)
    if not text.strip():
        return []
    seps = (cfg.separator, *(s for s in FALLBACK_SEPARATORS if s != cfg.separator))
    pieces = _split(text, 0, len(text), seps, toks, cfg.target_tokens - cfg.overlap_tokens)
    chunks: list[Chunk] = []
    total, limit = 0, output_limit(len(text))
    i = 0
    while i < len(pieces) and len(chunks) < cfg.max_chunks:
        start, end, n = pieces[i][0], pieces[i][1], toks.count(*pieces[i])
        budget = cfg.target_tokens - (cfg.overlap_tokens if chunks else 0)
        i += 1
        while i < len(pieces) and n + toks.count(*pieces[i]) <= budget:
            end, n = pieces[i][1], n + toks.count(*pieces[i])
            i += 1
        if chunks and cfg.overlap_tokens:
            prev_last = toks.index_at(chunks[-1].end_char) - 1  # last token of the previous chunk
            k = max(toks.index_at(chunks[-1].start_char), prev_last - cfg.overlap_tokens + 1)
            if 0 <= k <= prev_last:
                start = min(start, toks.starts[k])
        a, b = _trim(text, start, end)
        if a < b:
            chunks.append(Chunk(text[a:b], a, b))
            total += b - a
            if total > limit:
                raise _too_much(len(text), cfg)
    return chunks


# Overlap repeats text: with overlap_tokens near target_tokens every chunk is nearly the
# whole input again (250 KB once became a 1 GB response). The chunks returned may hold at
# most this many times the input (plus a little), however the config is set.
MAX_OUTPUT_FACTOR = 4
OUTPUT_SLACK = 1 << 16


def output_limit(n_chars: int) -> int:
    return MAX_OUTPUT_FACTOR * n_chars + OUTPUT_SLACK


def _too_much(n_chars: int, cfg: FixedConfig) -> InvalidInput:
    return InvalidInput(f"these chunks would repeat the input's {n_chars} characters more than {MAX_OUTPUT_FACTOR} "
                        f"times over (overlap_tokens {cfg.overlap_tokens} of target_tokens {cfg.target_tokens}); "
                        "lower overlap_tokens", "config.text.overlap_tokens")


def chunks_from_boundaries(text: str, ends: list[int], cfg: FixedConfig) -> list[Chunk]:
    """Model-based chunking: cut `text` after each char offset in `ends` (where a chunker model
    saw a boundary); a piece longer than target_tokens is split further the fixed way (with its
    overlap); at most max_chunks. Offsets index the original text, as for fixed chunks."""
    cfg.check()
    cuts = sorted({e for e in ends if 0 < e < len(text)})
    chunks: list[Chunk] = []
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        a, b = _trim(text, a, b)
        if a >= b:
            continue
        piece = text[a:b]
        if count_tokens(piece) <= cfg.target_tokens:
            chunks.append(Chunk(piece, a, b))
        else:
            chunks += [Chunk(c.text, a + c.start_char, a + c.end_char) for c in fixed_chunks(piece, cfg)]
        if len(chunks) >= cfg.max_chunks:
            break
        if sum(len(c.text) for c in chunks) > output_limit(len(text)):
            raise _too_much(len(text), cfg)
    return chunks[: cfg.max_chunks]
