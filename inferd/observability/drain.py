"""Graceful drain: stop admitting, let what runs finish, then let the server exit.

`begin()` (SIGTERM through server.py, or POST /admin/drain) flips `draining`: the
middleware answers new requests 503 + Retry-After and health says "draining". Requests
already inside (streams included: they count until their last byte) go on; once none is
left, or `timeout` seconds have passed, every `on_done` callback runs (the uvicorn server
sets should_exit there, and exits 0). At the timeout, the `on_timeout` coroutines run first
(the service fails the work still held, with a retryable 503) and streams get up to
`GRACE` seconds to write that error frame: a client sees why its stream ended, never a
connection cut mid-answer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("inferd.drain")
GRACE = 2.0  # seconds for streams to end with their error frame after the timeout's abort


class Drain:
    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self.draining = False
        self.active = 0            # requests inside the app that drain waits for
        self.started_at: float | None = None
        self.on_done: list[Callable[[], None]] = []
        self.on_timeout: list[Callable[[], Awaitable[None]]] = []
        self.done = False
        self._task: asyncio.Task | None = None

    def enter(self) -> None:
        self.active += 1

    def leave(self) -> None:
        self.active -= 1

    def retry_after_s(self) -> int:
        """How long a refused client should wait: the drain's remaining time (a restart
        usually follows), at least a second."""
        if self.started_at is None:
            return 1
        return max(1, int(self.timeout - (time.monotonic() - self.started_at)) + 1)

    def begin(self) -> bool:
        """Start draining (on the event loop's thread). False if already draining."""
        if self.draining:
            return False
        self.draining, self.started_at = True, time.monotonic()
        log.warning("draining: refusing new requests, waiting for %d in flight (at most %.0fs)",
                    self.active, self.timeout)
        self._task = asyncio.get_running_loop().create_task(self._wait())
        return True

    async def _wait(self) -> None:
        deadline = self.started_at + self.timeout  # type: ignore[operator]
        while self.active > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.active > 0:
            log.warning("drain timeout: failing the %d requests still running", self.active)
            for abort in self.on_timeout:
                try:
                    await abort()
                except Exception:
                    log.exception("a drain abort failed")
            grace = time.monotonic() + GRACE
            while self.active > 0 and time.monotonic() < grace:
                await asyncio.sleep(0.05)
            if self.active > 0:
                log.warning("drain timeout: %d requests still running are cut off", self.active)
        else:
            log.info("drained: no request in flight")
        self.done = True
        for fn in self.on_done:
            try:
                fn()
            except Exception:
                log.exception("a drain callback failed")
