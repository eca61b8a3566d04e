"""Dynamic batching for seq2seq decoders (rewriters on ONNX): a WorkQueue whose rule groups
inputs into decoder cohorts and steps them.

One worker thread per loaded model. Inputs that are waiting when the worker comes round —
every input of one request, and everything other requests sent meanwhile — form a *cohort*:
ONE encoder pass over all of them (padded; the mask keeps padding out of cross-attention),
ONE first decoder step, then one decoder step per token for all the cohort's rows at once
(num_beams rows per beam-search input). Cohorts cannot merge (their self-attention caches
have different lengths and the decoder graphs take no self-attention mask), so the worker
steps every live cohort in turn: a request that arrives while a long batch decodes starts at
once in a new cohort instead of waiting for the old one to finish.

- An input whose search finished leaves its cohort's rows at once (its answer is sent).
- An input whose request went away (client disconnected) is dropped before the next step.
- A failing pass fails every input of that cohort, each with its own error; others go on.
- Memory: a cohort's rows x padded source length stays within `max_tokens` (the encoder
  pass and the cross-attention cache scale with it), all live cohorts together within
  `LIVE_FACTOR` x `max_tokens`, and at most `max_rows` rows live at once; inputs beyond
  wait for the next cohort. One input over the budget still runs, alone.

The scheduler owns the batching; the search (greedy, sampling, beams) and the model are the
runtime's, behind the `Decoding` and `Seq2SeqBackend` protocols below (runtimes/seq2seq
satisfies both structurally), so the runtime stays a leaf.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from inferd.scheduling.work_queue import Entry, OfRule, WorkQueue

LIVE_FACTOR = 4  # live cohorts' rows x source tokens, in units of one cohort's budget


class Params(Protocol):
    """What the scheduler reads of one input's decode parameters."""

    @property
    def num_beams(self) -> int: ...
    @property
    def decoder_start(self) -> int: ...


class Search(Protocol):
    """One input's search: done once it has its answer (`results`, best first)."""

    done: bool
    results: list[list[int]]

    def stop(self) -> None: ...


class StepPlan(Protocol):
    """How a cohort's searches map onto decoder rows after one step."""

    parents: np.ndarray                # new row -> old row
    tokens: np.ndarray                 # next decoder input token of each new row
    spans: list[tuple[int, int]]       # rows of each search (end exclusive)


class Decoding(Protocol):
    """The search side (runtimes/seq2seq/decoding.py, the module itself, satisfies it)."""

    def make_search(self, p: Any) -> Search: ...
    def plan_step(self, searches: list[Any], spans: list[tuple[int, int]], logits: np.ndarray) -> StepPlan: ...


class Seq2SeqBackend(Protocol):
    """The model: encode() -> first() -> step()...; a state's take(rows) reorders and drops rows."""

    def encode(self, inputs: list[tuple[int, ...]], pad_id: int) -> tuple[np.ndarray, np.ndarray]: ...
    def first(self, tokens: np.ndarray, hidden: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, Any]: ...
    def step(self, tokens: np.ndarray, state: Any) -> tuple[np.ndarray, Any]: ...


@dataclass
class Seq2SeqStats:
    encoder_passes: int = 0
    decoder_steps: int = 0
    cohorts: int = 0
    inputs: int = 0
    cancelled: int = 0
    failed: int = 0
    generated_rows: int = 0    # row-steps decoded (a beam of 4 for 3 steps = 12)


Input = tuple[tuple[int, ...], Any]  # (source token ids, decode params)


@dataclass(eq=False)
class _Cohort:
    jobs: list[Entry[Input]]
    searches: list[Search] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    state: Any = None
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    id: int = 0
    width: int = 0            # padded source length
    started: bool = False


def _beams(e: Entry[Input]) -> int:
    return int(e.item[1].num_beams)


class Cohorts:
    """The rule: at most one new cohort per round, within the row and memory budgets; every
    live cohort advances one decoder step per round."""

    def __init__(self, backend: Seq2SeqBackend, decoding: Decoding, pad_id: int, max_rows: int, max_tokens: int):
        self.backend, self.decoding, self.pad_id = backend, decoding, pad_id
        self.max_rows, self.max_tokens = max(1, max_rows), max(1, max_tokens)
        self.stats = Seq2SeqStats()

    def take(self, pending: Sequence[Entry[Input]], active: Sequence[_Cohort]) -> list[_Cohort]:
        """Inputs for a new cohort, in arrival order, within the row and memory budgets."""
        out: list[Entry[Input]] = []
        rows = sum(len(c.tokens) for c in active)
        live = sum(len(c.tokens) * c.width for c in active)
        mine, longest = 0, 0
        for j in pending:
            wide = max(longest, len(j.item[0]))
            cost = (mine + _beams(j)) * wide
            fits = (rows + _beams(j) <= self.max_rows and cost <= self.max_tokens
                    and live + cost <= LIVE_FACTOR * self.max_tokens)
            if fits or (not out and not active):  # one oversized input still runs, alone
                out.append(j)
                rows += _beams(j)
                mine += _beams(j)
                longest = wide
        return [_Cohort(out)] if out else []

    def held(self, c: _Cohort) -> list[Entry[Input]]:
        return c.jobs

    def step(self, c: _Cohort) -> bool:
        if not c.started:
            self._start(c)
        self._drop_left(c)
        if not len(c.tokens):
            return False
        logits, c.state = self.backend.step(c.tokens, c.state)
        self.stats.decoder_steps += 1
        self._advance(c, logits)
        return bool(len(c.tokens))

    def dropped(self, n: int) -> None:
        self.stats.cancelled += n

    def failed(self, c: _Cohort, n: int) -> None:
        self.stats.failed += n

    def _start(self, c: _Cohort) -> None:
        """The encoder pass and the first decoder step of every row."""
        c.started = True
        hidden, mask = self.backend.encode([j.item[0] for j in c.jobs], self.pad_id)
        self.stats.encoder_passes += 1
        reps = np.array([_beams(j) for j in c.jobs])
        rows = np.repeat(np.arange(len(c.jobs)), reps)
        starts = np.array([j.item[1].decoder_start for j in c.jobs for _ in range(_beams(j))])
        logits, c.state = self.backend.first(starts, hidden[rows], mask[rows])
        a = 0
        for j in c.jobs:
            c.searches.append(self.decoding.make_search(j.item[1]))
            c.spans.append((a, a + _beams(j)))
            a += _beams(j)
        self.stats.cohorts += 1
        self.stats.inputs += len(c.jobs)
        c.id, c.width, c.tokens = self.stats.cohorts, int(mask.shape[1]), starts
        self._advance(c, logits)

    def _advance(self, c: _Cohort, logits: np.ndarray) -> None:
        self.stats.generated_rows += len(logits)
        plan = self.decoding.plan_step(c.searches, c.spans, logits)
        for j, s in zip(c.jobs, c.searches):
            if s.done and not j.settled:
                j.resolve(s.results)
        c.state = c.state.take(plan.parents) if len(plan.parents) else None
        c.tokens, c.spans = plan.tokens, plan.spans

    def _drop_left(self, c: _Cohort) -> None:
        """The rows of inputs whose requests went away leave before the next step."""
        gone = {i for i, (j, s) in enumerate(zip(c.jobs, c.searches)) if j.gone and not s.done}
        if not gone:
            return
        keep_rows: list[int] = []
        spans = []
        for i, (a, b) in enumerate(c.spans):
            if i in gone:
                c.searches[i].stop()
                self.stats.cancelled += 1
                spans.append((len(keep_rows), len(keep_rows)))
                continue
            start = len(keep_rows)
            keep_rows.extend(range(a, b))
            spans.append((start, len(keep_rows)))
        rows = np.array(keep_rows, dtype=np.int64)
        c.state = c.state.take(rows) if len(rows) else None
        c.tokens, c.spans = c.tokens[rows], spans


class Seq2SeqScheduler(WorkQueue[Input, _Cohort]):
    rule: Cohorts
    backend, pad_id, max_rows, max_tokens, stats = OfRule(), OfRule(), OfRule(), OfRule(), OfRule()

    def __init__(self, backend: Seq2SeqBackend, decoding: Decoding, pad_id: int, max_rows: int = 256,
                 max_tokens: int = 8192, name: str = "rewriter"):
        super().__init__(Cohorts(backend, decoding, pad_id, max_rows, max_tokens), name)

    async def submit(self, inputs: Sequence[tuple[int, ...]], params: Sequence[Params]) -> list[Any]:
        """For each input, its generated token lists (best first) or its exception."""
        return await self.gather([(tuple(x), p) for x, p in zip(inputs, params)])
