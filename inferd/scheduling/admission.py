"""Admission control: at most `max_in_flight` requests run, at most `max_queue` wait (FIFO,
each at most `queue_timeout` seconds); anything beyond is refused at once with Overloaded,
whose retry_after_ms estimates when a slot frees up."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator

from inferd.errors import Overloaded
from inferd.observability.context import note_admitted


class Admission:
    def __init__(self, max_in_flight: int, max_queue: int, queue_timeout: float = 60.0):
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.in_flight = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
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
    async def slot(self) -> AsyncIterator[None]:
        t_arrived = time.monotonic()
        if self.in_flight >= self.max_in_flight or self._waiters:
            if len(self._waiters) >= self.max_queue:
                raise self._refuse(f"{self.in_flight} running, {self.queued} queued", "queue_full")
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(asyncio.shield(fut), self.queue_timeout)
            except asyncio.TimeoutError:
                if fut.done():  # granted just as the timer fired: give the slot back
                    self._release()
                else:
                    self._waiters.remove(fut)
                raise self._refuse(f"waited {self.queue_timeout:.0f}s in the queue", "queue_timeout") from None
            except asyncio.CancelledError:
                if fut.done():
                    self._release()
                else:
                    self._waiters.remove(fut)
                raise
        else:
            self.in_flight += 1
        t0 = time.monotonic()
        note_admitted(t0 - t_arrived)  # x-queue-time, the trace's queue span
        try:
            yield
        finally:
            self._hold_ewma = 0.8 * self._hold_ewma + 0.2 * (time.monotonic() - t0)
            self._release()

    def _release(self) -> None:
        # Hand the slot straight to the oldest waiter so nobody can jump the queue.
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.in_flight -= 1
