"""The per-model speech queue: windows (<= 30 s chunks of audio) of every request wait here,
and the model's one worker thread decodes them in batches, so concurrent requests share one
loaded model and one encoder pass instead of a model copy each. A WorkQueue whose rule groups
by decode options.

- A batch is the oldest waiting window plus the windows waiting with the same decode options
  (task, beam size, temperatures, timestamps, prompt; languages may differ), up to
  `max_batch`, oldest first: no request starves, and a long file's windows batch together.
- A window whose request went away (its future cancelled) is dropped before its batch runs:
  a client that disconnects stops costing work at the next window.
- If a batch raises, every window in it fails with the error; the worker goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from inferd.scheduling.work_queue import Entry, OfRule, OneCallBatches, WorkQueue, check_count, resolve


class SpeechRuntime(Protocol):
    """What the queue drives (runtimes/speech satisfies it structurally)."""

    rate: int
    multilingual: bool

    @property
    def capabilities(self) -> frozenset[str]: ...
    def check(self, opts: Any, language: str | None) -> None: ...
    def decode_batch(self, chunks: Sequence[Any], opts: Any) -> list[Any]: ...
    def close(self) -> None: ...


@dataclass
class SpeechStats:
    batches: int = 0
    windows: int = 0
    cancelled: int = 0
    failed_batches: int = 0
    largest_batch: int = 0


Window = tuple[Any, Any]  # (audio chunk, decode options)
Batch = list[Entry[Window]]


class SameOptions(OneCallBatches[Window]):
    """The rule: the oldest window and those waiting with its options, one batch at a time."""

    def __init__(self, runtime: SpeechRuntime, max_batch: int, name: str):
        self.runtime, self.max_batch, self.name = runtime, max(1, max_batch), name
        self.stats = SpeechStats()

    def take(self, pending: Sequence[Entry[Window]], active: Sequence[Batch]) -> list[Batch]:
        key = pending[0].item[1]
        return [[e for e in pending if e.item[1] == key][: self.max_batch]]

    def step(self, batch: Batch) -> bool:
        out = check_count(self.runtime.decode_batch([e.item[0] for e in batch], batch[0].item[1]),
                          len(batch), self.name, "windows")
        self.stats.batches += 1  # counted before the answers go out: a caller may read them at once
        self.stats.windows += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        resolve(batch, out)
        return False


class SpeechQueue(WorkQueue[Window, Batch]):
    rule: SameOptions
    runtime, max_batch, stats = OfRule(), OfRule(), OfRule()

    def __init__(self, runtime: SpeechRuntime, max_batch: int = 8, name: str = "speech"):
        super().__init__(SameOptions(runtime, max_batch, name), name, what="transcription")

    def submit(self, chunks: Sequence[Any], opts: Any) -> list[asyncio.Future[Any]]:
        """One future per window, resolved in any order; cancel a future to drop its window."""
        return [e.fut for e in self.enqueue([(c, opts) for c in chunks])]
