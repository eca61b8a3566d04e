"""Semantic chunking, the pure half: sentence spans, the windows compared at each gap between
sentences, their cosine similarity, where to break, and packing into chunks within min/max
tokens. The embedding itself is the service's (service/semantic_chunking.py).

A gap after sentence i compares the `window` sentences that end at i with the `window`
sentences that start at i + 1, so a low similarity points at that gap and not at its
neighbours (a window centred on each sentence blurs the change over 2 * window gaps).
Tokens are the fixed chunker's (text/chunking.py: words and punctuation marks), so
`max_tokens` means what `target_tokens` means there."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

import numpy as np

from inferd.errors import InvalidInput
from inferd.text.chunking import _TOKEN, Chunk, FixedConfig, chunks_from_boundaries, count_tokens

# A sentence ends after a run of terminators (and closing quotes or brackets) followed by
# whitespace, after a CJK full stop (no space follows those), or at a line break.
_CUT = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s)|[\u3002\uff01\uff1f]+|\n")
MAX_WINDOW = 8
# Sentences embedded per text at most: longer texts are cut into this many runs of adjacent
# sentences (each run embedded as one unit), so a 30 MB body costs a bounded number of passes:
# at most 2 x 1023 windows, no more than one embeddings request of --max-batch-inputs (2048).
MAX_UNITS = 1024
MAX_WINDOW_CHARS = 4096  # a window embedded at most: more than an embedder's 512 tokens of prose
DEFAULT_PERCENTILE = 10.0  # neither threshold nor percentile given: the lowest 10% of gaps break


# The built-in chunker's served name (registry/builtins.py lists it; the Antfly face checks
# config.semantic against it).
SEMANTIC = "semantic"


@dataclass(frozen=True)
class SemanticConfig:
    """`config.semantic` of a chunk request. threshold: break where the cosine similarity of
    the windows either side of a gap is below it; percentile: break at the gaps whose similarity
    is at or below that percentile of this text's gaps (the default, 10)."""
    embedder: str | None = None
    threshold: float | None = None
    percentile: float | None = None
    window: int = 1
    min_tokens: int = 0
    max_tokens: int = 500
    # Each chunk after the first starts with the previous one's last overlap_tokens (counted
    # within max_tokens). 0 unless config.text.overlap_tokens is given: topic cuts need none.
    overlap_tokens: int = 0

    def check(self) -> None:
        if self.threshold is not None and self.percentile is not None:
            raise InvalidInput("give threshold or percentile, not both", "config.semantic.threshold")
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
            raise InvalidInput("threshold is a cosine similarity, between -1 and 1", "config.semantic.threshold")
        if self.percentile is not None and not 0.0 < self.percentile < 100.0:
            raise InvalidInput("percentile must be between 0 and 100 (exclusive)", "config.semantic.percentile")
        if not 1 <= self.window <= MAX_WINDOW:
            raise InvalidInput(f"window must be between 1 and {MAX_WINDOW} sentences", "config.semantic.window")
        if self.max_tokens < 1:
            raise InvalidInput("max_tokens must be at least 1", "config.semantic.max_tokens")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise InvalidInput(f"min_tokens ({self.min_tokens}) must be between 0 and max_tokens "
                               f"({self.max_tokens})", "config.semantic.min_tokens")
        if not 0 <= self.overlap_tokens < self.max_tokens:
            raise InvalidInput(f"overlap_tokens ({self.overlap_tokens}) must be smaller than max_tokens "
                               f"({self.max_tokens})", "config.text.overlap_tokens")


def _add(text: str, a: int, b: int, out: list[tuple[int, int]]) -> None:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    if a < b:
        out.append((a, b))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) character spans of the sentences, whitespace trimmed, empty ones dropped.
    Cuts fall on whitespace or after punctuation, so no token of the fixed chunker's counting
    straddles two spans: the spans' token counts add up to the text's."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _CUT.finditer(text):
        _add(text, start, m.end(), spans)
        start = m.end()
    _add(text, start, len(text), spans)
    return spans


def group_spans(spans: list[tuple[int, int]], max_units: int = MAX_UNITS) -> list[tuple[int, int]]:
    """At most `max_units` spans: runs of ceil(n / max_units) adjacent sentences joined."""
    k = -(-len(spans) // max_units) if spans else 1
    if k <= 1:
        return spans
    return [(spans[i][0], spans[min(i + k, len(spans)) - 1][1]) for i in range(0, len(spans), k)]


def gap_windows(n: int, window: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """For each gap i (between sentence i and i + 1): the sentence ranges [a, b) compared,
    the `window` sentences ending at i and the `window` starting at i + 1 (fewer at the ends)."""
    return [((max(0, i - window + 1), i + 1), (i + 1, min(n, i + 1 + window))) for i in range(n - 1)]


def window_spans(units: list[tuple[int, int]], window: int, max_chars: int = MAX_WINDOW_CHARS
                 ) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """What to embed: the distinct character spans of the windows gap_windows compares, and
    for each gap the index of its left and right span. A window over max_chars keeps the part
    next to its gap (the left one its end, the right one its start): the embedder would keep
    only its first tokens anyway, and the embedded text stays bounded (2 x gaps x max_chars)."""
    def left(r: tuple[int, int]) -> tuple[int, int]:
        end = units[r[1] - 1][1]
        return max(units[r[0]][0], end - max_chars), end

    def right(r: tuple[int, int]) -> tuple[int, int]:
        start = units[r[0]][0]
        return start, min(units[r[1] - 1][1], start + max_chars)

    gaps = gap_windows(len(units), window)
    lefts, rights = [left(lt) for lt, _ in gaps], [right(rt) for _, rt in gaps]
    spans = sorted(set(lefts) | set(rights))
    at = {sp: i for i, sp in enumerate(spans)}
    return spans, [at[sp] for sp in lefts], [at[sp] for sp in rights]


def adjacent_similarity(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (gaps, dims) matrices."""
    left = np.asarray(left, dtype=np.float64)
    right = np.asarray(right, dtype=np.float64)
    norms = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    return np.asarray(np.einsum("ij,ij->i", left, right) / np.maximum(norms, 1e-12))


def breakpoints(sims: np.ndarray, threshold: float | None = None, percentile: float | None = None) -> list[int]:
    """The gaps to break at: similarity below `threshold`, else at or below the `percentile`-th
    percentile of `sims` (linear interpolation, numpy's default)."""
    sims = np.asarray(sims, dtype=np.float64)
    if sims.size == 0:
        return []
    if threshold is not None:
        return [int(i) for i in np.flatnonzero(sims < threshold)]
    cut = float(np.percentile(sims, DEFAULT_PERCENTILE if percentile is None else percentile))
    return [int(i) for i in np.flatnonzero(sims <= cut)]


def _split_oversize(a: int, b: int, max_tokens: int, prefix: list[int], sims: np.ndarray
                    ) -> list[tuple[int, int]]:
    """Sentences [a, b) over max tokens: cut at the weakest gap inside, again and again (an
    explicit stack, not recursion: a long text with a steady slope would be deep)."""
    out: list[tuple[int, int]] = []
    stack = [(a, b)]
    while stack:
        lo, hi = stack.pop()
        if hi - lo == 1 or prefix[hi] - prefix[lo] <= max_tokens:
            out.append((lo, hi))
            continue
        g = lo + int(np.argmin(sims[lo:hi - 1]))  # gap g lies between sentence g and g + 1
        stack += [(g + 1, hi), (lo, g + 1)]  # the left half is popped (and emitted) first
    return out


def pack(tokens: list[int], sims: np.ndarray, breaks: list[int], min_tokens: int, max_tokens: int
         ) -> list[tuple[int, int]]:
    """Sentence ranges [a, b) of the chunks. The text is cut at `breaks` (gap indexes); a
    segment over max_tokens is cut at its weakest gaps; then a segment under min_tokens joins
    the neighbour across the more similar of its two gaps, where the sum fits max_tokens (a
    segment that fits with neither stays short). A single sentence over max_tokens stays one
    range here (the caller cuts it the fixed way)."""
    n = len(tokens)
    if n == 0:
        return []
    sims = np.asarray(sims, dtype=np.float64)
    prefix = [0]
    for t in tokens:
        prefix.append(prefix[-1] + t)
    bounds = [0, *sorted({g + 1 for g in breaks if 0 <= g < n - 1}), n]
    segs: list[tuple[int, int]] = []
    for a, b in zip(bounds, bounds[1:]):
        segs += _split_oversize(a, b, max_tokens, prefix, sims)
    # Merge the short ones on a linked list: each merge is O(1), so the pass is linear.
    lo = [s[0] for s in segs]
    hi = [s[1] for s in segs]
    tok = [prefix[b] - prefix[a] for a, b in segs]
    m = len(segs)
    prev, nxt = list(range(-1, m - 1)), [*range(1, m), -1]
    alive = [True] * m
    queue = deque(i for i in range(m) if tok[i] < min_tokens)
    while queue:
        i = queue.popleft()
        if not alive[i] or tok[i] >= min_tokens:
            continue
        options = []  # (similarity across the gap, prefer left on ties, neighbour)
        if prev[i] != -1 and tok[prev[i]] + tok[i] <= max_tokens:
            options.append((sims[lo[i] - 1], 1, prev[i]))
        if nxt[i] != -1 and tok[nxt[i]] + tok[i] <= max_tokens:
            options.append((sims[hi[i] - 1], 0, nxt[i]))
        if not options:
            continue
        j = max(options)[2]
        left, right = (j, i) if j == prev[i] else (i, j)
        hi[left], tok[left], alive[right] = hi[right], tok[left] + tok[right], False
        nxt[left] = nxt[right]
        if nxt[right] != -1:
            prev[nxt[right]] = left
        if tok[left] < min_tokens:
            queue.append(left)
    return [(lo[i], hi[i]) for i in range(m) if alive[i]]


def chunks_of(text: str, spans: list[tuple[int, int]], ranges: list[tuple[int, int]], cfg: SemanticConfig,
              separator: str = "\n\n", max_chunks: int = 50) -> list[Chunk]:
    """The chunks of sentence ranges (packed within max_tokens - overlap_tokens); a range over
    that (one long sentence) is cut the fixed way (separator, then lines, sentences, words).
    Then each chunk after the first is widened back over the previous chunk's last
    overlap_tokens tokens: none is over max_tokens."""
    ends = [spans[b - 1][1] for _, b in ranges]
    chunks = chunks_from_boundaries(text, ends, FixedConfig(target_tokens=cfg.max_tokens - cfg.overlap_tokens,
                                                            overlap_tokens=0, separator=separator,
                                                            max_chunks=max_chunks))
    if not cfg.overlap_tokens:
        return chunks
    out = chunks[:1]
    for prev, c in zip(chunks, chunks[1:]):
        starts = [m.start() for m in _TOKEN.finditer(prev.text)]
        a = prev.start_char + starts[max(0, len(starts) - cfg.overlap_tokens)] if starts else c.start_char
        out.append(Chunk(text[a:c.end_char], a, c.end_char))
    return out


def span_tokens(text: str, spans: list[tuple[int, int]]) -> list[int]:
    return [count_tokens(text[a:b]) for a, b in spans]


def plan(tokens: list[int], sims: np.ndarray, cfg: SemanticConfig) -> list[tuple[int, int]]:
    """The sentence ranges of the chunks, from the gap similarities and the config (room left
    in each chunk for the overlap it will be widened by)."""
    return pack(tokens, sims, breakpoints(sims, cfg.threshold, cfg.percentile), cfg.min_tokens,
                cfg.max_tokens - cfg.overlap_tokens)
