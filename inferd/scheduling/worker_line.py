"""What both generator schedulers share: the line of jobs in front of one worker thread and
the worker's loop around a scheduler's step. generation.py (llama.cpp's continuous batching)
and genai.py (onnxruntime-genai's engine) differ in how a step runs; how jobs are submitted,
bounded, cancelled, held back by an idle call, and failed when the worker stops or dies is
one contract, so it lives here once and both engines hold a `WorkerLine`.

Threads: `submit`, `cancel`, `call_when_idle`, `queued` and `close` are called from any
thread; `run` is the worker thread's body; `waiting` is the worker's (admission order)."""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from inferd.errors import InferenceFailed, ModelUnloaded, Overloaded, copy_error
from inferd.observability.stats import GenStats
from inferd.scheduling.idle_calls import IdleCalls
from inferd.scheduling.jobs import Job
from inferd.types import Delta

log = logging.getLogger("inferd.generation")


def emit(job: Job, delta: Delta) -> None:
    """Hand `delta` to the job's listener; a listener that is gone (closed loop, client left)
    cancels the job, so no more tokens are generated for nobody."""
    try:
        job.sink(delta)
    except Exception:
        log.debug("delta sink failed; cancelling", exc_info=True)
        job.cancelled = True


def record_finish(stats: GenStats, job: Job, now: float):
    """The job's final usage, added to llama-server's llamacpp:* totals (/metrics)."""
    usage = job.usage(now)
    stats.prompt_seconds += usage.prompt_seconds
    stats.predicted_seconds += usage.generation_seconds
    stats.n_tokens_max = max(stats.n_tokens_max, usage.total_tokens)
    return usage


class WorkerLine:
    """`max_waiting` bounds the jobs not yet admitted: beyond it `submit` refuses with
    Overloaded (503 + retry_after_ms), so no request can grow the line without bound."""

    def __init__(self, name: str, max_waiting: int):
        self.name, self.max_waiting = name, max(1, max_waiting)
        self.cond = threading.Condition()
        self.inbox: list[Job] = []  # submitted, not yet seen by the worker
        self.waiting: collections.deque[Job] = collections.deque()  # seen, waiting for a slot
        self.idle_calls = IdleCalls()  # call_when_idle (idle_calls.py)
        self.submitted = 0
        self.closing = False
        self.dead: BaseException | None = None

    # ---- any thread -------------------------------------------------------------------------
    def submit(self, jobs: Sequence[Job], stats: GenStats) -> None:
        with self.cond:
            if self.closing:
                raise ModelUnloaded(self.name)
            if self.dead is not None:
                raise InferenceFailed(f"the worker of model '{self.name}' died: {self.dead}")
            waiting = self.queued
            if waiting >= self.max_waiting:
                stats.rejected += 1
                raise Overloaded(f"model '{self.name}' has {waiting} requests waiting for a slot; retry later",
                                 retry_after_ms=1000)
            for j in jobs:
                self.submitted += 1
                j.number = self.submitted
                self.inbox.append(j)
            self.cond.notify()

    def cancel(self, job: Job) -> None:
        """Stop `job` (and its n > 1 siblings) at the worker's next step."""
        with self.cond:
            for j in job.group:
                j.cancelled = True
            self.cond.notify()

    def call_when_idle(self, fn: Callable[[], Any], reset_cache: bool = True,
                       default_only: bool = False) -> concurrent.futures.Future:
        """Run `fn` on the worker once every job submitted before this call has finished;
        jobs submitted after it wait until `fn` has run. For changes that invalidate the KV
        cache. `default_only`: a change of the default adapter set, which only the jobs
        without their own set see: it waits for those alone, and holds only those."""
        with self.cond:
            fut = self.idle_calls.add(fn, reset_cache, self.submitted, default_only)
            self.cond.notify()
        return fut

    @property
    def queued(self) -> int:
        return len(self.waiting) + len(self.inbox)

    def close(self, thread: threading.Thread, timeout: float) -> bool:
        """Ask the worker to stop and wait for it; False if it is still inside a step."""
        with self.cond:
            self.closing = True
            self.cond.notify()
        thread.join(timeout)
        return not thread.is_alive()

    def take_all(self) -> list[Job]:
        """Every job not admitted (inbox and waiting, siblings included), removed from the line."""
        with self.cond:
            self.waiting.extend(self.inbox)
            self.inbox.clear()
        jobs = [j for w in self.waiting for j in w.group]
        self.waiting.clear()
        return jobs

    # ---- worker thread ----------------------------------------------------------------------
    def run(self, step: Callable[[], None], running: Callable[[], int],
            fail_all: Callable[[Callable[[], BaseException]], None],
            after_failed_step: Callable[[], None] = lambda: None, at_end: Callable[[], None] = lambda: None) -> None:
        """The worker's body: sleep until there is work, then `step`. A failed step fails every
        job it held (`fail_all`, each with its own error) and the worker goes on; closing fails
        what is left with ModelUnloaded (retryable); a bug that escapes kills the worker but
        first fails every held request and idle call, so none hangs. `at_end` runs last on
        this thread either way (native state bound to the thread)."""
        try:
            while True:
                with self.cond:
                    while not (self.inbox or self.waiting or running() or self.idle_calls or self.closing):
                        self.cond.wait()
                    self.waiting.extend(self.inbox)
                    self.inbox.clear()
                    closing = self.closing
                if closing:
                    fail_all(lambda: ModelUnloaded(self.name))
                    self.idle_calls.fail(lambda: ModelUnloaded(self.name))
                    at_end()
                    return
                try:
                    step()
                except Exception as e:  # a failed step loses every sequence in it
                    log.exception("generation step failed on %s", self.name)
                    fail_all(functools.partial(copy_error, e, "generation failed"))
                    after_failed_step()
        except BaseException as e:  # never leave a request hanging, even on a bug
            self.dead = e
            log.exception("generation worker of %s died", self.name)
            why = f"generation worker failed: {e}"
            fail_all(lambda: InferenceFailed(why))
            self.idle_calls.fail(lambda: InferenceFailed(why))
            at_end()
