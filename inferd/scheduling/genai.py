"""The scheduler of an ONNX generator (onnxruntime-genai), on its own worker thread, with the
same job and streaming contract as the llama.cpp engine (generation.py): the service submits
the same `Job`, cancels it the same way and gets the same Deltas (text through TextOut, so
stop strings, UTF-8 and the chat output parser behave exactly as for GGUF generators).

Unlike llama.cpp, onnxruntime-genai owns the KV cache and the sampling: its `Engine` takes
whole requests and advances all of them in one forward pass per step. So this loop admits up
to `n_seq` jobs (the engine's batch size), steps the backend, and routes each step's tokens to
their jobs; it does no prefix reuse, speculation, context shift, LoRA or slot pinning, and the
service's requests for those are refused at submit with a 400 naming the field.

Batching: all running jobs share each step. Whether a job can join a running batch is the
runtime's (continuous on a PagedAttention model, micro-batches on a static engine: see
runtimes/onnx_genai/lanes.py); `batch_sizes` counts the rows of every forward pass."""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from inferd.errors import InferdError, InvalidInput
from inferd.observability.stats import GenStats
from inferd.scheduling.jobs import Adapters, Job, Slot, refusal
from inferd.scheduling.speculation import Drafters
from inferd.scheduling.textout import TextOut
from inferd.scheduling.worker_line import WorkerLine, emit, record_finish
from inferd.types import Delta, FinishReason

log = logging.getLogger("inferd.genai")


class LaneBackend(Protocol):
    """What runtimes/onnx_genai gives the scheduler: lanes (running sequences) it starts, steps
    and stops (the runtime decodes their tokens: GenaiRuntime)."""

    def start(self, prompt: list[int], turn: Any, max_tokens: int) -> Any: ...
    # one step: ((lane, token or None, finish reason or None), the rows of each forward pass)
    def step(self) -> tuple[list[tuple[Any, int | None, str | None]], list[int]]: ...
    def stop(self, lane: Any) -> None: ...
    def close(self) -> None: ...  # on the worker thread, as it ends (the native engine is bound to it)


class GenaiRuntime(Protocol):
    n_seq: int
    n_ctx_seq: int

    @property
    def lanes(self) -> LaneBackend: ...

    def piece_decoder(self) -> Callable[[int], bytes]: ...
    def is_eog(self, token: int) -> bool: ...


def unsupported(job: Job) -> tuple[str, str] | None:
    """The first engine control of `job` an ONNX generator cannot honour: (message, param)."""
    if job.top_logprobs is not None:
        return "logprobs are not supported by ONNX generators (onnxruntime-genai)", "logprobs"
    if job.pin_slot is not None:
        return "id_slot is not supported by ONNX generators (onnxruntime-genai schedules its own batch)", "id_slot"
    if job.compaction > 0:
        return "cache_compaction_ratio (context shift) is not supported by ONNX generators", "cache_compaction_ratio"
    if job.speculation is not None and job.speculation.drafter is not None:
        return "speculative decoding (draft_model) is not supported by ONNX generators", "draft_model"
    if job.adapters:
        return "LoRA adapters are not supported by ONNX generators", "lora"
    if job.thinking is not None and job.thinking.budget is not None:
        return ("a reasoning budget is not supported by ONNX generators (onnxruntime-genai cannot force the "
                "end-of-thinking marker)", "reasoning_budget")
    if job.media:
        return "images are not supported by ONNX generators", "messages"
    return None


class GenaiScheduler:
    """`n_seq` jobs run at once (the slots /load and /slots show); more wait in arrival order,
    at most `max_waiting` of them (then Overloaded: 503 + retry_after_ms)."""

    def __init__(self, runtime: GenaiRuntime, name: str = "model", max_waiting: int = 1024):
        self.runtime, self.backend = runtime, runtime  # `backend`: the observer reads n_ctx_seq there
        self.lanes = runtime.lanes
        self.name = name
        self.slots = [Slot(i) for i in range(max(1, runtime.n_seq))]
        self.line = WorkerLine(name, max_waiting)  # the same line and worker loop as generation.py's
        self.waiting = self.line.waiting
        self.steps = 0
        self.batch_sizes: collections.Counter[int] = collections.Counter()  # rows per forward pass
        self.stats = GenStats()
        self.drafters = Drafters()         # none are ever built: speculation is refused
        self.default_adapters: Adapters = ()
        self._lane_job: dict[int, Job] = {}
        self._lane_of: dict[int, Any] = {}  # job id -> its lane
        self._pieces: dict[int, Callable[[int], bytes]] = {}
        self._thread = threading.Thread(target=self._run, name=f"genai:{name}", daemon=True)
        self._thread.start()

    # ---- any thread -------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        for j in job.group:
            problem = unsupported(j)
            if problem is not None:
                raise InvalidInput(*problem)
        self.line.submit(job.group, self.stats)  # n > 1: each choice is a sequence of its own in the batch

    def cancel(self, job: Job) -> None:
        self.line.cancel(job)

    def call_when_idle(self, fn: Callable[[], Any], reset_cache: bool = True,
                       default_only: bool = False) -> concurrent.futures.Future:
        return self.line.call_when_idle(fn, reset_cache, default_only)

    @property
    def dead(self) -> BaseException | None:
        return self.line.dead

    @property
    def max_waiting(self) -> int:
        return self.line.max_waiting

    @property
    def active(self) -> int:
        return sum(1 for s in self.slots if s.job is not None)

    @property
    def queued(self) -> int:
        return self.line.queued

    host_cache = None
    disk_cache = None

    def close(self, timeout: float = 60.0) -> bool:
        return self.line.close(self._thread, timeout)

    # ---- worker thread ----------------------------------------------------------------------
    def _run(self) -> None:
        # the native engine answers only the thread that made it: closed here, as the worker ends
        self.line.run(self._step, lambda: self.active, self._fail_all, at_end=self._close_lanes)

    def _close_lanes(self) -> None:
        try:
            self.lanes.close()
        except Exception:
            log.exception("closing the engine of %s failed", self.name)

    def _step(self) -> None:
        now = time.perf_counter()
        self._drop_cancelled(now)
        running = [s.job for s in self.slots if s.job is not None]
        if self.line.idle_calls.due(running, self.waiting):
            self.line.idle_calls.run_first(lambda: None, lambda: None)
        self._admit(now)
        if not self.active:
            return
        events, passes = self.lanes.step()
        self.steps += 1
        for rows in passes:
            self.batch_sizes[rows] += 1
            self.stats.batch.observe(rows)
        now = time.perf_counter()
        for lane, tok, fin in events:
            job = self._lane_job.get(id(lane))
            if job is None or job.done:
                continue
            if tok is not None:
                self._take(job, tok, now)
            elif fin is not None:
                self._finish(job, "cancelled" if fin == "cancelled" else ("length" if fin == "length" else "stop"), now)

    def _drop_cancelled(self, now: float) -> None:
        for job in [j for j in self.waiting if j.cancelled]:
            self.waiting.remove(job)
            self._finish(job, "cancelled", now)
        for slot in self.slots:
            if slot.job is not None and slot.job.cancelled:
                self._finish(slot.job, "cancelled", now)

    def _admit(self, now: float) -> None:
        call = self.line.idle_calls.first
        while self.waiting:
            free = [s for s in self.slots if s.job is None]
            i = next((k for k, j in enumerate(self.waiting) if call is None or not call.holds(j)), None)
            if not free or i is None:
                return
            job = self.waiting[i]
            del self.waiting[i]
            problem = refusal(job, len(self.slots), self.runtime.n_ctx_seq)
            if problem is not None:
                cls, message, param = problem
                emit(job, Delta(error=cls(message, param)))
                self._close_job(job)
                continue
            slot = free[0]
            job.slot, job.t_admitted, job.out = slot.id, now, TextOut(job.stop)
            slot.job, slot.last_used, slot.cache = job, now, list(job.prompt)
            self.stats.prompt_tokens += len(job.prompt)
            if job.max_tokens <= 0:
                self._finish(job, "length", now)
                continue
            try:
                lane = self.lanes.start(job.prompt, job.sampler, job.max_tokens)
            except InferdError as e:
                emit(job, Delta(error=e))
                self._close_job(job)
                continue
            self._lane_job[id(lane)] = job
            self._lane_of[id(job)] = lane
            self._pieces[id(job)] = self.runtime.piece_decoder()

    def _take(self, job: Job, tok: int, now: float) -> None:
        if not job.t_first:
            job.t_first = now
            self.stats.ttft.observe(now - job.arrived)
        else:
            self.stats.itl.observe(now - job.t_last)
        job.t_last = now
        if self.runtime.is_eog(tok):
            self._finish(job, "stop", now)
            return
        job.generated.append(tok)
        self.stats.generated_tokens += 1
        assert job.out is not None and job.slot is not None
        piece = self._pieces[id(job)](tok)
        text = job.out.feed(piece)
        if job.thinking is not None:
            job.thinking.feed(piece, False)
        self.slots[job.slot].cache.append(tok)
        if job.out.stopped:
            self._finish(job, "stop", now, text, [tok])
        elif len(job.generated) >= job.max_tokens:
            self._finish(job, "length", now, text, [tok])
        else:
            emit(job, Delta(text=text, tokens=[tok], usage=job.usage(now)))

    def _finish(self, job: Job, reason: FinishReason, now: float, text: str = "",
                tokens: list[int] | None = None) -> None:
        if job.done:
            return
        if reason != "cancelled" and job.out is not None:
            text += job.out.flush()
        usage = record_finish(self.stats, job, now)
        emit(job, Delta(text=text, tokens=tokens or [], finish_reason=reason, usage=usage,
                              stop_word=job.out.stop_word if job.out is not None else None))
        self._close_job(job, reason)

    def _close_job(self, job: Job, reason: str = "error") -> None:
        job.done = True
        job.next_token = None
        self.stats.finish(reason, time.perf_counter() - job.arrived)
        lane = self._lane_of.pop(id(job), None)
        self._pieces.pop(id(job), None)
        if lane is not None:
            self._lane_job.pop(id(lane), None)
            try:
                self.lanes.stop(lane)
            except Exception:
                log.exception("freeing a sequence failed")
        if job.slot is not None and self.slots[job.slot].job is job:
            slot = self.slots[job.slot]
            slot.job, slot.last_used = None, time.perf_counter()
        try:
            job.sampler.close()
        except Exception:
            log.exception("closing a sampler failed")

    def _fail_all(self, make_error: Callable[[], BaseException]) -> None:
        jobs = [s.job for s in self.slots if s.job is not None] + self.line.take_all()
        for job in jobs:
            if not job.done:
                emit(job, Delta(error=make_error()))
                self._close_job(job)
