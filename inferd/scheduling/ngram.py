"""N-gram drafting: prompt lookup over one request's own context, and a pool one engine
shares across its slots (llama.cpp's `ngram-mod` idea, written here from its description:
hash each n-gram, store the token that followed it, draft by chaining lookups of the rolling
tail), so requests that repeat each other help each other.

- ContextIndex: per request, the latest position after every n-gram (n_min..n_max tokens) of
  its context, kept as the context grows, so a lookup is a few dict reads, not a scan of the
  whole context each step (ngram_lookup is that scan: the reference the tests hold it to).
- NgramPool: a direct-mapped table of `entries` slots (a 64-bit hash of POOL_N tokens and the
  token after them: 12 bytes a slot, allocated on first use). A newer n-gram whose hash lands
  on a taken slot overwrites it, so memory is fixed whatever the traffic and old n-grams are
  evicted by new ones. The full hash is kept beside the token, so two n-grams sharing a slot
  are told apart (no draft from a neighbour's entry). Drafts from it are verified like any
  other: a stale or colliding entry costs a rejected draft, never a different output.

Worker thread only (the engine calls propose and remember between decodes)."""

from __future__ import annotations

from typing import Any

import numpy as np

NGRAM_MAX, NGRAM_MIN = 4, 2
POOL_N = 8          # tokens of a pool key: shared across requests, so long enough to be specific
_MASK = (1 << 64) - 1
_MUL, _MIX = 6364136223846793005, 0xBF58476D1CE4E5B9  # an LCG step per token, then a finalizer
_FEW = 32           # up to this many new n-grams are written one by one, more in one numpy pass


def ngram_lookup(ctx: list[int], k: int, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> list[int]:
    """The k tokens that followed the latest earlier occurrence of the context's last n tokens
    (longest n first); [] when none recurs."""
    size = len(ctx)
    for n in range(min(n_max, size - 1), n_min - 1, -1):
        tail = ctx[size - n:]
        first = tail[0]
        i = size - n - 1
        while i >= 0:
            if ctx[i] == first and ctx[i:i + n] == tail:
                return ctx[i + n:i + n + k]
            i -= 1
    return []


def text_only(draft: list[int]) -> list[int]:
    """Up to the first image placeholder (negative ids: see generation.py): never a draft token."""
    for i, t in enumerate(draft):
        if t < 0:
            return draft[:i]
    return draft


class ContextIndex:
    """n-gram -> the position after its latest occurrence, for n in n_min..n_max, over the
    n-grams whose next token is known (so the context's own tail never finds itself)."""

    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX):
        self.maps: list[tuple[int, dict[tuple[int, ...], int]]] = [(n, {}) for n in range(n_max, n_min - 1, -1)]
        self.done = 0   # n-grams ending before this position are indexed

    def update(self, ctx: list[int]) -> None:
        stop = len(ctx) - 1  # an n-gram ending at `end` is indexed once ctx[end + 1] exists
        for end in range(self.done, stop):
            for n, m in self.maps:
                s = end - n + 1
                if s >= 0:
                    m[tuple(ctx[s:end + 1])] = end + 1
        self.done = max(self.done, stop)

    def lookup(self, ctx: list[int], k: int) -> list[int]:
        for n, m in self.maps:
            if len(ctx) > n:
                j = m.get(tuple(ctx[-n:]))
                if j is not None:
                    return ctx[j:j + k]
        return []


def _hash(window: list[int]) -> int:
    """The pool's hash of one n-gram; equals what NgramPool.add computes for it with numpy."""
    h = 0
    for t in window:
        h = (h * _MUL + t + 1) & _MASK
    h ^= h >> 31
    h = (h * _MIX) & _MASK
    h ^= h >> 29
    return h or 1  # 0 marks an empty slot


class NgramPool:
    """The shared pool: POOL_N-token n-gram -> the token after it, in `entries` fixed slots."""

    def __init__(self, entries: int, n: int = POOL_N):
        if entries <= 0:
            raise ValueError("an n-gram pool needs at least one entry")
        self.entries, self.n = entries, n
        self._keys: np.ndarray | None = None  # allocated on first add: an engine that never drafts pays nothing
        self._vals: np.ndarray | None = None
        self.writes = 0

    @property
    def nbytes(self) -> int:
        """Bytes the table holds once allocated (fixed: entries x 12)."""
        return self.entries * (8 + 4)

    def used(self) -> int:
        return 0 if self._keys is None else int(np.count_nonzero(self._keys))

    def add(self, tokens: list[int], start: int = 0) -> None:
        """Every n-gram of `tokens` whose next token is at position >= start (and >= n)."""
        n = self.n
        lo = max(start, n)
        if lo >= len(tokens):
            return
        if self._keys is None:
            self._keys = np.zeros(self.entries, np.uint64)
            self._vals = np.zeros(self.entries, np.int32)
        if len(tokens) - lo <= _FEW:  # a decode step's few tokens: numpy's per-call cost would dominate
            self._add_few(tokens, lo)
            return
        # image placeholders are negative hashes that may not fit an int64: -1 stands for them all
        a = np.asarray([t if t >= 0 else -1 for t in tokens[lo - n:]], dtype=np.int64)
        m = len(a) - n   # windows a[i:i+n] with their next token a[i+n]
        h = np.zeros(m, np.uint64)
        mul = np.uint64(_MUL)
        for j in range(n):
            h = h * mul + (a[j:j + m] + 1).astype(np.uint64)
        h ^= h >> np.uint64(31)
        h = h * np.uint64(_MIX)
        h ^= h >> np.uint64(29)
        h[h == 0] = 1
        nxt = a[n:]
        ok = (np.lib.stride_tricks.sliding_window_view(a, n)[:m].min(axis=1) >= 0) & (nxt >= 0)  # no image ids
        h, nxt = h[ok], nxt[ok]
        slots = (h % np.uint64(self.entries)).astype(np.int64)
        assert self._vals is not None
        self._keys[slots] = h   # a repeated slot keeps the later n-gram in both arrays alike
        self._vals[slots] = nxt.astype(np.int32)
        self.writes += len(h)

    def _add_few(self, tokens: list[int], lo: int) -> None:
        keys, vals, n = self._keys, self._vals, self.n
        assert keys is not None and vals is not None
        for f in range(lo, len(tokens)):
            window, nxt = tokens[f - n:f], tokens[f]
            if nxt < 0 or min(window) < 0:
                continue
            h = _hash(window)
            i = h % self.entries
            keys[i], vals[i] = h, nxt
            self.writes += 1

    def draft(self, ctx: list[int], k: int) -> list[int]:
        """Up to k tokens, chaining: the token after the tail's n-gram, then after the n-gram
        that ends with it, and so on while the pool knows the next one."""
        n = self.n
        if self._keys is None or len(ctx) < n or k <= 0:
            return []
        keys, vals = self._keys, self._vals
        assert vals is not None
        window, out = list(ctx[-n:]), list[int]()
        while len(out) < k:
            if window[-1] < 0:
                break
            h = _hash(window)
            i = h % self.entries
            if int(keys[i]) != h:
                break
            t = int(vals[i])
            out.append(t)
            window = window[1:] + [t]
        return out


class NgramDrafter:
    """`draft_model: "ngram"`, and what `speculation_policy: auto` drafts with when a request
    names no draft model. With a pool (an engine's own drafter) it reads the pool first (its
    POOL_N-token keys are the more specific match) and writes each request's context into
    it; the module's NGRAM has none (prompt lookup only)."""

    name = "ngram"
    text_only = False    # works on prompts with images (placeholders are never drafted)

    def __init__(self, pool: NgramPool | None = None):
        self.pool = pool

    def propose(self, asks: list[tuple[int, list[int], int, Any]]) -> list[list[int]]:
        return [self.draft(ctx, k, sp) for _seq, ctx, k, sp in asks]

    def draft(self, ctx: list[int], k: int, sp: Any) -> list[int]:
        """`sp`: the request's speculation.Speculation (its lookup state; not imported: that
        module imports this one)."""
        pool = self.pool
        if pool is not None:
            if sp.share:
                pool.add(ctx, sp.pooled)
                sp.pooled = len(ctx)
            d = text_only(pool.draft(ctx, k))
            if d:
                sp.source = "pool"
                return d
        if not sp.lookup:  # auto on a prompt that gives no grounding: the pool only
            return []
        idx: Any = sp.index
        if idx is None:
            idx = sp.index = ContextIndex(sp.ngram_min)
        idx.update(ctx)
        sp.source = "prompt"
        return text_only(idx.lookup(ctx, k))

    def remember(self, tokens: list[int], start: int) -> None:
        """A finished request's tokens from `start` on go into the pool."""
        if self.pool is not None:
            self.pool.add(tokens, start)

    def forget(self, seq: int) -> None:
        pass

    def close(self) -> None:
        pass


NGRAM = NgramDrafter()
