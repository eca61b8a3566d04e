"""Dynamic batching for seq2seq decoders (rewriters on ONNX).

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
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.errors import InferenceFailed, copy_error
from inferd.runtimes.seq2seq.decoding import DecodeParams, Search, make_search, plan_step

log = logging.getLogger("inferd.seq2seq")

LIVE_FACTOR = 4  # live cohorts' rows x source tokens, in units of one cohort's budget


@dataclass
class Seq2SeqStats:
    encoder_passes: int = 0
    decoder_steps: int = 0
    cohorts: int = 0
    inputs: int = 0
    cancelled: int = 0
    failed: int = 0
    generated_rows: int = 0    # row-steps decoded (a beam of 4 for 3 steps = 12)


@dataclass
class _Job:
    ids: tuple[int, ...]
    params: DecodeParams
    fut: asyncio.Future
    search: Search | None = None
    cancelled: bool = False
    delivered: bool = False


@dataclass
class _Cohort:
    jobs: list[_Job]
    spans: list[tuple[int, int]]
    state: Any
    tokens: np.ndarray
    id: int = 0
    width: int = 0            # padded source length


def _deliver(fut: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


class Seq2SeqScheduler:
    def __init__(self, backend: Any, pad_id: int, max_rows: int = 256, max_tokens: int = 8192,
                 name: str = "rewriter"):
        self.backend, self.pad_id, self.name = backend, pad_id, name
        self.max_rows, self.max_tokens = max(1, max_rows), max(1, max_tokens)
        self.stats = Seq2SeqStats()
        self._pending: list[_Job] = []
        self._cohorts: list[_Cohort] = []
        self._cv = threading.Condition()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name=f"seq2seq-{name}", daemon=True)
        self._thread.start()

    # ---- event-loop side ---------------------------------------------------------------------
    async def submit(self, inputs: Sequence[tuple[int, ...]], params: Sequence[DecodeParams]) -> list[Any]:
        """For each input, its generated token lists (best first) or its exception."""
        if self._closed:
            raise InferenceFailed(f"model '{self.name}' was unloaded; retry the request")
        if not inputs:
            return []
        loop = asyncio.get_running_loop()
        self._loop = loop
        jobs = [_Job(tuple(x), p, loop.create_future()) for x, p in zip(inputs, params)]
        with self._cv:
            self._pending.extend(jobs)
            self._cv.notify()
        try:
            return list(await asyncio.gather(*(j.fut for j in jobs), return_exceptions=True))
        except asyncio.CancelledError:
            with self._cv:
                for j in jobs:  # the worker drops their rows before its next step
                    j.cancelled = True
                self._cv.notify()
            raise

    # ---- worker thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._pending and not self._cohorts:
                    self._cv.wait()
                if self._closed:
                    return
                fresh = self._take_pending()
            try:
                if fresh:
                    self._start(fresh)
                for c in list(self._cohorts):
                    self._step(c)
            except Exception as exc:  # noqa: BLE001 - a bug here must not leave requests hanging
                held = [j for c in self._cohorts for j in c.jobs if not j.delivered]
                self._cohorts = []
                self._fail(held + [j for j in fresh if not j.delivered], exc)

    def _take_pending(self) -> list[_Job]:
        """Inputs for a new cohort, in arrival order, within the row and memory budgets."""
        out: list[_Job] = []
        rows = sum(len(c.tokens) for c in self._cohorts)
        live = sum(len(c.tokens) * c.width for c in self._cohorts)
        mine, longest = 0, 0
        keep: list[_Job] = []
        for j in self._pending:
            if j.cancelled or j.fut.done():
                self.stats.cancelled += 1
                continue
            wide = max(longest, len(j.ids))
            cost = (mine + j.params.num_beams) * wide
            fits = (rows + j.params.num_beams <= self.max_rows and cost <= self.max_tokens
                    and live + cost <= LIVE_FACTOR * self.max_tokens)
            if fits or (not out and not self._cohorts):  # one oversized input still runs, alone
                out.append(j)
                rows += j.params.num_beams
                mine += j.params.num_beams
                longest = wide
            else:
                keep.append(j)
        self._pending = keep
        return out

    def _finish(self, job: _Job, error: BaseException | None = None) -> None:
        value = None if error is not None else (job.search.results if job.search else [])
        try:
            job.fut.get_loop().call_soon_threadsafe(_deliver, job.fut, value, error)
        except RuntimeError:  # its event loop is closed: nobody is waiting any more
            pass

    def _fail(self, jobs: list[_Job], exc: BaseException) -> None:
        self.stats.failed += len(jobs)
        log.error("seq2seq batch of %s failed", self.name, exc_info=exc)
        for j in jobs:
            j.delivered = True
            self._finish(j, copy_error(exc))

    def _start(self, jobs: list[_Job]) -> None:
        try:
            hidden, mask = self.backend.encode([j.ids for j in jobs], self.pad_id)
            self.stats.encoder_passes += 1
            reps = np.array([j.params.num_beams for j in jobs])
            rows = np.repeat(np.arange(len(jobs)), reps)
            starts = np.array([j.params.decoder_start for j in jobs for _ in range(j.params.num_beams)])
            logits, state = self.backend.first(starts, hidden[rows], mask[rows])
            spans, a = [], 0
            for j in jobs:
                j.search = make_search(j.params)
                spans.append((a, a + j.params.num_beams))
                a += j.params.num_beams
            self.stats.cohorts += 1
            self.stats.inputs += len(jobs)
            c = _Cohort(jobs, spans, state, starts, id=self.stats.cohorts, width=int(mask.shape[1]))
            self._advance(c, logits)
        except Exception as exc:  # noqa: BLE001 - every input must hear about it
            self._fail([j for j in jobs if not j.delivered], exc)
            return
        if len(c.tokens):
            self._cohorts.append(c)

    def _advance(self, c: _Cohort, logits: np.ndarray) -> None:
        self.stats.generated_rows += len(logits)
        searches = [j.search for j in c.jobs]
        plan = plan_step(searches, c.spans, logits)  # type: ignore[arg-type]
        for j, s in zip(c.jobs, searches):
            if s is not None and s.done and not j.delivered:
                j.delivered = True
                self._finish(j)
        c.state = c.state.take(plan.parents) if len(plan.parents) else None
        c.tokens, c.spans = plan.tokens, plan.spans

    def _drop_cancelled(self, c: _Cohort) -> None:
        gone = [i for i, j in enumerate(c.jobs) if (j.cancelled or j.fut.done()) and j.search and not j.search.done]
        if not gone:
            return
        keep_rows: list[int] = []
        spans = []
        for i, (j, (a, b)) in enumerate(zip(c.jobs, c.spans)):
            if i in gone:
                j.search.stop()  # type: ignore[union-attr]
                self.stats.cancelled += 1
                spans.append((len(keep_rows), len(keep_rows)))
                continue
            start = len(keep_rows)
            keep_rows.extend(range(a, b))
            spans.append((start, len(keep_rows)))
        rows = np.array(keep_rows, dtype=np.int64)
        c.state = c.state.take(rows) if len(rows) else None
        c.tokens, c.spans = c.tokens[rows], spans

    def _step(self, c: _Cohort) -> None:
        self._drop_cancelled(c)
        if not len(c.tokens):
            self._cohorts.remove(c)
            return
        try:
            logits, state = self.backend.step(c.tokens, c.state)
            self.stats.decoder_steps += 1
            c.state = state
            self._advance(c, logits)
        except Exception as exc:  # noqa: BLE001 - a failing pass fails the inputs it holds
            self._cohorts.remove(c)
            self._fail([j for j in c.jobs if not j.delivered], exc)
            return
        if not len(c.tokens):
            self._cohorts.remove(c)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=30)
        jobs = self._pending + [j for c in self._cohorts for j in c.jobs if not j.delivered]
        for j in jobs:
            self._finish(j, InferenceFailed("the model was unloaded while the request ran; retry"))
        self._pending, self._cohorts = [], []
