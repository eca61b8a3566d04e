"""uvicorn.Server whose first SIGTERM drains (drain.py) instead of closing the listener at
once: clients keep getting a proper 503 + Retry-After while in-flight work finishes, and
the process exits 0. A second SIGTERM, or SIGINT (Ctrl+C), is uvicorn's own shutdown.

`after_start`: work that need not delay the listening socket (the machine summary of the start
log imports llama.cpp, onnxruntime and CTranslate2 to name their builds): each runs once, on a
thread of its own, as soon as the server listens."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn

from inferd.observability.drain import Drain


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drain, after_start: list[Callable[[], None]] | None = None):
        super().__init__(config)
        self.drain = drain
        self.after_start = list(after_start or ())
        self._loop: asyncio.AbstractEventLoop | None = None
        drain.on_done.append(self._exit)

    def _exit(self) -> None:
        self.should_exit = True

    async def serve(self, sockets=None) -> None:  # type: ignore[override]
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets=None) -> None:  # type: ignore[no-untyped-def]
        await super().startup(sockets)
        if self.started:
            for fn in self.after_start:
                threading.Thread(target=_quietly, args=(fn,), name="inferd-after-start", daemon=True).start()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self.drain.draining and self._loop is not None and not self.should_exit:
            # Not recorded in _captured_signals: uvicorn would re-raise it after shutdown,
            # and the process would die of SIGTERM instead of exiting 0.
            self._loop.call_soon_threadsafe(self.drain.begin)
            return
        super().handle_exit(sig, frame)


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # a log line that failed must not take anything down with it
        logging.getLogger("inferd").exception("start-up task %s failed", getattr(fn, "__name__", fn))
