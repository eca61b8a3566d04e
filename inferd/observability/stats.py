"""Per-model statistics that the schedulers record on their own worker threads. The
observer (observer.py) hands each loaded model the one object kept under its name, so
counters stay monotonic across unload and reload, and renders them at scrape time."""

from __future__ import annotations

from inferd.observability.prom import LATENCY_BUCKETS, SIZE_BUCKETS, TOKEN_LATENCY_BUCKETS, Histogram


class GenStats:
    """One generator's engine: latencies per sequence, token counts, decode batch sizes.
    Plain int counters: the engine's worker is their only writer."""

    def __init__(self) -> None:
        self.ttft = Histogram(LATENCY_BUCKETS)            # arrival -> first token
        self.itl = Histogram(TOKEN_LATENCY_BUCKETS)       # gap between consecutive tokens of a sequence
        self.e2e = Histogram(LATENCY_BUCKETS)             # arrival -> sequence finished (any reason)
        self.batch = Histogram(SIZE_BUCKETS)              # sequences carried by one decode call
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.cached_tokens = 0                            # prompt tokens reused from the KV cache
        self.drafted_tokens = 0                           # speculative draft tokens verified
        self.accepted_tokens = 0                          # ... of which the target accepted
        self.context_shifts = 0                           # cache_compaction_ratio shifts
        self.host_cache_restored_tokens = 0               # prompt tokens restored from --cache-ram
        self.prompt_seconds = 0.0                         # admission -> first token, summed over sequences
        self.predicted_seconds = 0.0                      # first -> last token, summed over sequences
        self.n_tokens_max = 0                             # most tokens one sequence held (prompt + generated)
        self.disk_cache_restored_tokens = 0               # prompt tokens restored from --cache-dir
        self.prompt_cache_refused = 0                     # reuses refused: the cache had dropped cells (SWA)
        self.finished: dict[str, int] = {}                # finish reason -> sequences
        self.rejected = 0                                 # refused: the engine's wait queue was full

    def finish(self, reason: str, seconds: float) -> None:
        self.e2e.observe(seconds)
        self.finished[reason] = self.finished.get(reason, 0) + 1


class EncStats:
    """One encoder's batcher: forward-pass sizes (inputs) and padded tokens."""

    def __init__(self) -> None:
        self.batch = Histogram(SIZE_BUCKETS)
        self.padded_tokens = 0
        self.tokens = 0                                   # real (unpadded) tokens

    def record(self, items: int, padded: int, tokens: int) -> None:
        self.batch.observe(items)
        self.padded_tokens += padded
        self.tokens += tokens
