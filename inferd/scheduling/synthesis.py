"""The per-model synthesis queue: the sentences of every text-to-speech request wait here,
and the voice's one worker thread synthesises them in batches.

- Each request's sentences are synthesised in order: a batch takes at most one sentence of a
  request, its earliest still waiting, so a stream's next sentence is never held behind its
  own later ones and its first audio waits for one sentence only.
- A batch is the oldest waiting sentence plus the next sentences of other requests with the
  same `key` (Piper's scales: one input per batch), planned like the encoder batcher's
  batches (scheduling/batcher.plan: sorted by length, padded ids within `max_tokens`).
- A sentence whose request went away (its future cancelled) is dropped before its batch runs.
- If a batch raises, every sentence in it fails with the error; the worker goes on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from inferd.errors import ModelUnloaded
from inferd.scheduling.batcher import plan
from inferd.scheduling.futures import check_count, fail, fail_unloaded, resolve

log = logging.getLogger("inferd.synthesis")


class SpeakerRuntime(Protocol):
    """What the queue and the service drive (runtimes/tts satisfies it structurally)."""

    name: str
    sample_rate: int
    voices: tuple[str, ...]

    def prepare(self, text: str, voice: str | None, speed: float = 1.0) -> list[Any]: ...
    def synthesize_batch(self, items: Sequence[Any]) -> list[Any]: ...
    def close(self) -> None: ...


@dataclass
class _Entry:
    item: Any     # an utterance: has .key and .cost
    request: int
    fut: asyncio.Future


@dataclass
class SynthesisStats:
    batches: int = 0
    sentences: int = 0
    cancelled: int = 0
    failed_batches: int = 0
    largest_batch: int = 0


class SynthesisQueue:
    def __init__(self, runtime: SpeakerRuntime, max_batch: int = 8, max_tokens: int = 2048, name: str = "speaker"):
        self.runtime, self.name = runtime, name
        self.max_batch, self.max_tokens = max(1, max_batch), max(1, max_tokens)
        self._pending: list[_Entry] = []
        self._worker: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tts-{name}")
        self._ids = itertools.count()
        self.stats = SynthesisStats()
        self.closed = False

    def submit(self, items: Sequence[Any]) -> list[asyncio.Future]:
        """One future per sentence of one request, resolved in order; cancel them to drop them."""
        if self.closed:
            raise ModelUnloaded(self.name)
        loop = asyncio.get_running_loop()
        request = next(self._ids)
        entries = [_Entry(it, request, loop.create_future()) for it in items]
        self._pending.extend(entries)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return [e.fut for e in entries]

    def _take(self) -> list[_Entry]:
        live = [e for e in self._pending if not e.fut.done()]
        self.stats.cancelled += len(self._pending) - len(live)
        self._pending = live
        if not live:
            return []
        key = live[0].item.key
        heads: dict[int, _Entry] = {}
        for e in live:  # each request's earliest waiting sentence, oldest request first
            if e.request not in heads:
                heads[e.request] = e
        candidates = [e for e in heads.values() if e.item.key == key]
        batches = plan([e.item.cost for e in candidates], self.max_tokens, self.max_batch)
        batch = [candidates[i] for i in next(b for b in batches if 0 in b)]  # the one with the oldest
        taken = {id(e) for e in batch}
        self._pending = [e for e in live if id(e) not in taken]
        return batch

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch = self._take()
            if not batch:
                break
            try:
                out = await loop.run_in_executor(self._executor, self._run, [e.item for e in batch])
            except BaseException as exc:  # noqa: BLE001 - every sentence of the batch must hear about it
                self.stats.failed_batches += 1
                fail([e.fut for e in batch], exc, log, "synthesis")
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            self.stats.batches += 1
            self.stats.sentences += len(batch)
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
            resolve([e.fut for e in batch], out)

    def _run(self, items: list[Any]) -> list[Any]:
        return list(check_count(self.runtime.synthesize_batch(items), len(items), self.name, "sentences"))

    @property
    def waiting(self) -> int:
        return sum(1 for e in self._pending if not e.fut.done())

    def close(self) -> None:
        self.closed = True
        fail_unloaded([e.fut for e in self._pending], self.name)
        self._pending = []
        self._executor.shutdown(wait=True)
