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

A configuration of the one WorkQueue (work_queue.py): the rule below is what is its own.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from inferd.scheduling.batcher import plan
from inferd.scheduling.work_queue import Entry, OfRule, OneCallBatches, WorkQueue, check_count, resolve


class SpeakerRuntime(Protocol):
    """What the queue and the service drive (runtimes/tts satisfies it structurally)."""

    name: str
    sample_rate: int
    voices: tuple[str, ...]

    def prepare(self, text: str, voice: str | None, speed: float = 1.0) -> list[Any]: ...
    def synthesize_batch(self, items: Sequence[Any]) -> list[Any]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class _Sentence:
    utterance: Any  # has .key (Piper's scales) and .cost (padded ids)
    request: int


@dataclass
class SynthesisStats:
    batches: int = 0
    sentences: int = 0
    cancelled: int = 0
    failed_batches: int = 0
    largest_batch: int = 0


Batch = list[Entry[_Sentence]]


class SentencesInOrder(OneCallBatches[_Sentence]):
    """The rule: one batch at a time, of each request's earliest waiting sentence that shares
    the oldest one's key, planned within the token budget."""

    def __init__(self, runtime: SpeakerRuntime, max_batch: int, max_tokens: int, name: str):
        self.runtime, self.name = runtime, name
        self.max_batch, self.max_tokens = max(1, max_batch), max(1, max_tokens)
        self.stats = SynthesisStats()

    def take(self, pending: Sequence[Entry[_Sentence]], active: Sequence[Batch]) -> list[Batch]:
        if active:
            return []
        key = pending[0].item.utterance.key
        heads: dict[int, Entry[_Sentence]] = {}
        for e in pending:  # each request's earliest waiting sentence, oldest request first
            heads.setdefault(e.item.request, e)
        candidates = [e for e in heads.values() if e.item.utterance.key == key]
        batches = plan([e.cost for e in candidates], self.max_tokens, self.max_batch)
        return [[candidates[i] for i in next(b for b in batches if 0 in b)]]  # the one with the oldest

    def step(self, batch: Batch) -> bool:
        live = [e for e in batch if not e.gone]
        self.stats.cancelled += len(batch) - len(live)
        if not live:
            return False
        out = check_count(self.runtime.synthesize_batch([e.item.utterance for e in live]), len(live), self.name,
                          "sentences")
        self.stats.batches += 1
        self.stats.sentences += len(live)
        self.stats.largest_batch = max(self.stats.largest_batch, len(live))
        resolve(live, out)
        return False


class SynthesisQueue(WorkQueue[_Sentence, Batch]):
    rule: SentencesInOrder
    runtime, stats, max_batch, max_tokens = OfRule(), OfRule(), OfRule(), OfRule()

    def __init__(self, runtime: SpeakerRuntime, max_batch: int = 8, max_tokens: int = 2048, name: str = "speaker"):
        super().__init__(SentencesInOrder(runtime, max_batch, max_tokens, name), name, what="synthesis")
        self._ids = itertools.count()

    def submit(self, items: Sequence[Any]) -> list[asyncio.Future]:
        """One future per sentence of one request, resolved in order; cancel them to drop them."""
        request = next(self._ids)
        entries = self.enqueue([_Sentence(u, request) for u in items], [u.cost for u in items])
        return [e.fut for e in entries]
