"""A bounded pool for request preparation (template rendering, tokenizing, grammar checks).

Preparation is CPU work, so it leaves the event loop; `asyncio.to_thread` would put it on
the loop's shared default executor, where nobody can stop it: a client that left kept a
core busy for a minute while its admission slot was already free again and /metrics said
idle. Here preparation runs on a pool of its own (`--prep-threads`), inside the caller's
admission slot, and is cancellable:

    result = await pool.run(prepare, rt, req)

If the awaiting task is cancelled (client gone, shutdown), the task's flag is set; the work
sees it at its next checkpoint (`checkpoint()` between stages, and the template sandbox on
every call) and stops with `Cancelled`. `run` waits for that before re-raising, so the
admission slot is only released once the thread is really free. Work not yet started is
dropped without running."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from inferd.errors import Cancelled

T = TypeVar("T")
_local = threading.local()


def cancel_flag() -> threading.Event | None:
    """The cancel flag of the preparation running on this thread, if any."""
    return getattr(_local, "flag", None)


def checkpoint() -> None:
    """Stop here if the request this thread prepares was cancelled."""
    flag = cancel_flag()
    if flag is not None and flag.is_set():
        raise Cancelled("request cancelled during preparation")


class PrepPool:
    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._pool = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="inferd-prep")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        flag = threading.Event()

        def task() -> T:
            if flag.is_set():
                raise Cancelled("request cancelled before its preparation started")
            _local.flag = flag
            try:
                return fn(*args)
            finally:
                _local.flag = None

        fut = self._pool.submit(task)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            flag.set()
            if not fut.cancel():  # already running: let it reach its next checkpoint
                with contextlib.suppress(BaseException):
                    await asyncio.shield(asyncio.wrap_future(fut))
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
