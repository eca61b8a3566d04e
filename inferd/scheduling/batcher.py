"""Dynamic batching for encoder models (embedders, rerankers, token classifiers): a WorkQueue
whose rule groups by token budget.

Requests submit items (already tokenized; an item's cost is its token count). While the
model's worker thread runs one forward pass, new items wait; when it is free, the batcher
takes everything waiting, sorts it by length (so a batch pads as little as possible), cuts it
into batches whose padded size (items x longest) fits `max_tokens` and `max_items`, and runs
them one after another, each as ONE forward pass. A lone request therefore waits for nothing,
and 32 concurrent one-sentence requests cost about two forward passes instead of 32.

- Items whose request went away (future cancelled) are dropped before their batch runs.
- If a forward pass raises, only the items of that batch fail, each with its own error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import inferd.defaults as D
from inferd.observability.context import note_tokens
from inferd.observability.stats import EncStats
from inferd.scheduling.work_queue import Entry, OfRule, OneCallBatches, WorkQueue, check_count, resolve

RunBatch = Callable[[list[Any]], Sequence[Any]]
Batch = list[Entry[Any]]


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


class TokenBudget(OneCallBatches[Any]):
    """The rule: a round is everything waiting, planned into batches at once (what arrives
    meanwhile waits for the next round); each batch is one call of `run`."""

    def __init__(self, run: RunBatch, max_tokens: int, max_items: int, name: str):
        self.run, self.max_tokens, self.max_items, self.name = run, max(1, max_tokens), max(1, max_items), name
        self.stats = BatchStats()
        self.observed = EncStats()  # replaced by the observer's per-model object once loaded (/metrics)

    def take(self, pending: Sequence[Entry[Any]], active: Sequence[Batch]) -> list[Batch]:
        if active:  # a round is running
            return []
        return [[pending[i] for i in idx] for idx in plan([e.cost for e in pending], self.max_tokens, self.max_items)]

    def step(self, batch: Batch) -> bool:
        live = [e for e in batch if not e.gone]
        self.stats.cancelled += len(batch) - len(live)
        if not live:
            return False
        out = check_count(self.run([e.item for e in live]), len(live), self.name, "inputs")
        padded = len(live) * max(e.cost for e in live)
        self.stats.batches += 1
        self.stats.items += len(live)
        self.stats.padded_tokens += padded
        self.observed.record(len(live), padded, sum(e.cost for e in live))
        resolve(live, out)
        return False


class Batcher(WorkQueue[Any, Batch]):
    rule: TokenBudget
    run, max_tokens, max_items, stats = OfRule(), OfRule(), OfRule(), OfRule()
    observed = OfRule()  # EncStats: the observer sets its per-model object here (/metrics)

    def __init__(self, run: RunBatch, max_tokens: int = D.MAX_BATCH_TOKENS, max_items: int = D.MAX_BATCH_SIZE,
                 name: str = "encoder"):
        super().__init__(TokenBudget(run, max_tokens, max_items, name), name)

    async def submit(self, items: Sequence[Any], costs: Sequence[int]) -> list[Any]:
        """Results in item order. Raises the first failure; see submit_each for per-item errors."""
        results = await self.submit_each(items, costs)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    async def submit_each(self, items: Sequence[Any], costs: Sequence[int]) -> list[Any]:
        """Results in item order, where a failed item's result is its exception."""
        if items and not self.closed:
            note_tokens(sum(max(1, int(c)) for c in costs))  # x-compute-tokens of this request
        return await self.gather(items, costs)
