"""Dynamic batching for encoder models (embedders, rerankers, token classifiers).

Requests submit items (already tokenized; an item's cost is its token count). While the
model's worker thread runs one forward pass, new items wait; when it is free, the batcher
takes everything waiting, sorts it by length (so a batch pads as little as possible), cuts it
into batches whose padded size (items x longest) fits `max_tokens` and `max_items`, and runs
them one after another, each as ONE forward pass. A lone request therefore waits for nothing,
and 32 concurrent one-sentence requests cost about two forward passes instead of 32.

- Items whose request went away (future cancelled) are dropped before their batch runs.
- If a forward pass raises, only the items of that batch fail, each with its own error.
- Each batcher owns one worker thread: the model is never run from two threads at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import inferd.defaults as D
from inferd.errors import ModelUnloaded
from inferd.scheduling.futures import check_count, fail, fail_unloaded, resolve
from inferd.observability.context import note_tokens
from inferd.observability.stats import EncStats

log = logging.getLogger("inferd.batcher")

RunBatch = Callable[[list[Any]], Sequence[Any]]


@dataclass
class _Entry:
    item: Any
    cost: int
    fut: asyncio.Future


@dataclass
class BatchStats:
    batches: int = 0
    items: int = 0
    padded_tokens: int = 0
    cancelled: int = 0
    failed_batches: int = 0


def plan(costs: Sequence[int], max_tokens: int, max_items: int) -> list[list[int]]:
    """Indexes grouped into batches: sorted by cost, each batch's padded size within budget
    (an item larger than the budget runs alone). Pure, so it is tested on its own."""
    order = sorted(range(len(costs)), key=lambda i: costs[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        longest = costs[i]  # sorted ascending: the newcomer is the longest so far
        if cur and ((len(cur) + 1) * longest > max_tokens or len(cur) >= max_items):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


class Batcher:
    # the budgets default to --max-batch-tokens' and --max-batch-size's defaults (one declaration)
    def __init__(self, run: RunBatch, max_tokens: int = D.MAX_BATCH_TOKENS,
                 max_items: int = D.MAX_BATCH_SIZE, name: str = "encoder"):
        self.run, self.max_tokens, self.max_items, self.name = run, max(1, max_tokens), max(1, max_items), name
        self._pending: list[_Entry] = []
        self._worker: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"batch-{name}")
        self.stats = BatchStats()
        self.observed = EncStats()  # replaced by the observer's per-model object once loaded (/metrics)
        self.running = 0  # inputs in the forward pass now running (/load)
        self.closed = False

    async def submit(self, items: Sequence[Any], costs: Sequence[int]) -> list[Any]:
        """Results in item order. Raises the first failure; see submit_each for per-item errors."""
        results = await self.submit_each(items, costs)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    async def submit_each(self, items: Sequence[Any], costs: Sequence[int]) -> list[Any]:
        """Results in item order, where a failed item's result is its exception."""
        if self.closed:
            raise ModelUnloaded(self.name)
        if not items:
            return []
        loop = asyncio.get_running_loop()
        entries = [_Entry(it, max(1, int(c)), loop.create_future()) for it, c in zip(items, costs)]
        note_tokens(sum(e.cost for e in entries))  # x-compute-tokens of this request
        self._pending.extend(entries)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        try:
            return list(await asyncio.gather(*(e.fut for e in entries), return_exceptions=True))
        except asyncio.CancelledError:
            for e in entries:  # the batcher skips these
                e.fut.cancel()
            raise

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            round_, self._pending = self._pending, []
            live = [e for e in round_ if not e.fut.done()]
            self.stats.cancelled += len(round_) - len(live)
            for idx in plan([e.cost for e in live], self.max_tokens, self.max_items):
                batch = [live[i] for i in idx if not live[i].fut.done()]
                self.stats.cancelled += len(idx) - len(batch)
                if not batch:
                    continue
                self.running = len(batch)
                try:
                    out = await loop.run_in_executor(self._executor, self._run, [e.item for e in batch])
                except BaseException as exc:  # noqa: BLE001 - every entry must hear about it
                    self.running = 0
                    self.stats.failed_batches += 1
                    fail([e.fut for e in batch], exc, log, "inference")  # "inference failed: ..."
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                self.running = 0
                self.stats.batches += 1
                self.stats.items += len(batch)
                self.stats.padded_tokens += len(batch) * max(e.cost for e in batch)
                self.observed.record(len(batch), len(batch) * max(e.cost for e in batch), sum(e.cost for e in batch))
                resolve([e.fut for e in batch], out)

    @property
    def waiting(self) -> int:
        return sum(1 for e in self._pending if not e.fut.done())

    def _run(self, items: list[Any]) -> Sequence[Any]:
        return check_count(self.run(items), len(items), self.name, "inputs")

    def close(self) -> None:
        self.closed = True
        fail_unloaded([e.fut for e in self._pending], self.name)
        self._pending = []
        self._executor.shutdown(wait=True)

