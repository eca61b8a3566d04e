"""uvicorn.Server whose first SIGTERM drains (drain.py) instead of closing the listener at
once: clients keep getting a proper 503 + Retry-After while in-flight work finishes, and
the process exits 0. A second SIGTERM, or SIGINT (Ctrl+C), is uvicorn's own shutdown."""

from __future__ import annotations

import asyncio
import signal
from types import FrameType

import uvicorn

from inferd.observability.drain import Drain


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drain):
        super().__init__(config)
        self.drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None
        drain.on_done.append(self._exit)

    def _exit(self) -> None:
        self.should_exit = True

    async def serve(self, sockets=None) -> None:  # type: ignore[override]
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self.drain.draining and self._loop is not None and not self.should_exit:
            # Not recorded in _captured_signals: uvicorn would re-raise it after shutdown,
            # and the process would die of SIGTERM instead of exiting 0.
            self._loop.call_soon_threadsafe(self.drain.begin)
            return
        super().handle_exit(sig, frame)
