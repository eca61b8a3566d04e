"""Admission control: at most `max_in_flight` units of work run, at most `max_queue` requests
wait (FIFO, each at most `queue_timeout` seconds); anything beyond is refused at once with
Overloaded, whose retry_after_ms estimates when a slot frees up.

A request's `weight` is what it really puts on the engines (a batch of 64 generations is 64
units, capped at the whole capacity), so a batch cannot slip 64 jobs past a limit meant for
64 requests. Grants are strictly in arrival order: a heavy request at the head of the queue
is not overtaken by light ones behind it."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator

from inferd.errors import Overloaded
from inferd.observability.context import note_admitted, note_queued


class Admission:
    def __init__(self, max_in_flight: int, max_queue: int, queue_timeout: float = 60.0):
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.in_flight = 0
        self._waiters: collections.deque[tuple[asyncio.Future, int]] = collections.deque()
        self._hold_ewma = 1.0  # seconds a request holds its slot, smoothed
        self.rejected = 0
        self.rejections: collections.Counter[str] = collections.Counter()  # reason -> count (/metrics)

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def retry_after_ms(self) -> int:
        # Expected wait for the whole queue ahead to drain, bounded to a sane range.
        est = self._hold_ewma * (1 + self.queued) / max(1, self.max_in_flight)
        return int(min(30_000, max(100, est * 1000)))

    def _refuse(self, why: str, reason: str) -> Overloaded:
        self.rejected += 1
        self.rejections[reason] += 1
        return Overloaded(f"server is at capacity ({why}); retry later", self.retry_after_ms())

    @contextlib.asynccontextmanager
    async def slot(self, weight: int = 1) -> AsyncIterator[None]:
        w = max(1, min(int(weight), self.max_in_flight))
        t_arrived = time.monotonic()
        if self.in_flight + w > self.max_in_flight or self._waiters:
            if len(self._waiters) >= self.max_queue:
                raise self._refuse(f"{self.in_flight} running, {self.queued} queued", "queue_full")
            fut = asyncio.get_running_loop().create_future()
            note_queued()  # the operator's list shows it as queued until note_admitted
            waiter = (fut, w)
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(fut), self.queue_timeout)
            except asyncio.TimeoutError:
                if fut.done():  # granted just as the timer fired: give the slot back
                    self._release(w)
                else:
                    self._abandon(waiter)
                raise self._refuse(f"waited {self.queue_timeout:.0f}s in the queue", "queue_timeout") from None
            except asyncio.CancelledError:
                if fut.done():
                    self._release(w)
                else:
                    self._abandon(waiter)
                raise
        else:
            self.in_flight += w
        t0 = time.monotonic()
        note_admitted(t0 - t_arrived)  # x-queue-time, the trace's queue span
        try:
            yield
        finally:
            self._hold_ewma = 0.8 * self._hold_ewma + 0.2 * (time.monotonic() - t0)
            self._release(w)

    def _abandon(self, waiter: tuple[asyncio.Future, int]) -> None:
        """A waiter left (timeout, client gone): out of the queue at once; those behind it
        may now fit."""
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
        self._grant()

    def _release(self, weight: int) -> None:
        self.in_flight -= weight
        self._grant()

    def _grant(self) -> None:
        # Hand capacity to the oldest waiters, in order, so nobody can jump the queue.
        while self._waiters:
            fut, need = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if self.in_flight + need > self.max_in_flight:
                return
            self._waiters.popleft()
            self.in_flight += need
            fut.set_result(None)
