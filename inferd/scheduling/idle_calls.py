"""Calls that a generator's worker runs between jobs (GenerationEngine.call_when_idle): changes
that invalidate the KV cache (a LoRA switch, a slot restore) run once every job submitted
before them has finished, and the jobs submitted after them wait. A change of the default
adapter set concerns only the jobs without their own set: it waits for those alone, and holds
only those. The calls run in order, one per engine step."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from inferd.scheduling.jobs import Job


@dataclass(eq=False)
class IdleCall:
    fn: Callable[[], Any]
    reset_cache: bool
    barrier: int              # the number of the last job submitted before the call
    default_only: bool
    fut: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)

    def concerns(self, job: Job) -> bool:
        return not (self.default_only and job.own_adapters)

    def holds(self, job: Job) -> bool:
        """Must `job` wait for this call (submitted after it, and concerned)?"""
        return job.number > self.barrier and self.concerns(job)


class IdleCalls:
    def __init__(self) -> None:
        self._calls: list[IdleCall] = []
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._calls)

    @property
    def first(self) -> IdleCall | None:
        return self._calls[0] if self._calls else None

    def add(self, fn: Callable[[], Any], reset_cache: bool, barrier: int,
            default_only: bool) -> concurrent.futures.Future[Any]:
        call = IdleCall(fn, reset_cache, barrier, default_only)
        with self._lock:
            self._calls.append(call)
        return call.fut

    def due(self, running: Iterable[Job], waiting: Iterable[Job]) -> bool:
        """Can the first call run: no job it concerns runs, nor waits ahead of it?"""
        call = self.first
        return call is not None and not any(call.concerns(j) for j in running) \
            and not any(j.number <= call.barrier and call.concerns(j) for j in waiting)

    def run_first(self, reset: Callable[[], None], after_reset: Callable[[], None]) -> None:
        """Run the first call on the worker (`reset` the KV cache before it if it asked, and
        `after_reset` once it ran); its outcome goes to its future."""
        with self._lock:
            call = self._calls.pop(0)
        try:
            if call.reset_cache:
                reset()
            result = call.fn()
            if call.reset_cache:
                after_reset()
            call.fut.set_result(result)
        except BaseException as e:
            call.fut.set_exception(e)

    def fail(self, make_error: Callable[[], BaseException]) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for call in calls:
            call.fut.set_exception(make_error())
