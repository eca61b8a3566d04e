"""A real uvicorn server on a free loopback port, in a thread of the test process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from inferd.api.app import create_app
from inferd.api.http_protocol import http_protocol
from inferd.config import Settings, load_settings
from inferd.service import InferenceService


def free_port() -> int:
    """A port that was free a moment ago, for a server in a child process (which must bind it
    itself). In-process servers use `serve`, which binds first and keeps the socket: no race."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bound_socket() -> socket.socket:
    # IPPROTO_TCP, not the default 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # sockets whose proto says TCP, and an accepted socket inherits the listener's. With proto 0
    # every response after the first on a keep-alive connection waited ~40 ms for the client's
    # delayed ACK (uvicorn writes the head and the body apart), which is what the old tabular
    # benchmark's 44 ms one-row figure was. uvicorn's own listeners (`inferd serve`) say TCP.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.set_inheritable(True)
    return sock


class Running:
    def __init__(self, url: str, service: InferenceService, settings: Settings, loop: asyncio.AbstractEventLoop,
                 server: uvicorn.Server | None = None):
        self.url, self.service, self.settings, self.loop = url, service, settings, loop
        self.server = server  # uvicorn's: its open connections, for the socket tests

    def call(self, coro, timeout: float = 30):
        """Run a coroutine on the server's own event loop (to reach its service directly)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextlib.contextmanager
def serve(settings: Settings | None = None, **overrides: Any) -> Iterator[Running]:
    """Start inferd with `settings` (or defaults + overrides, with no built-in models and
    empty model dirs unless given) and yield its base URL."""
    if settings is None:
        overrides.setdefault("models_dir", "/nonexistent/models")
        overrides.setdefault("ml_dir", "/nonexistent/ml")
        overrides.setdefault("builtins", False)
        settings = load_settings(overrides)
    service = InferenceService.from_settings(settings)
    app = create_app(settings, service)
    # The socket is bound here and handed to uvicorn, so no other process can take the port
    # between choosing it and listening on it (the bind-then-release race).
    sock = _bound_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           access_log=False, lifespan="on", http=http_protocol()))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(sockets=[sock]),), daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield Running(f"http://127.0.0.1:{port}", service, settings, loop, server)
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        loop.close()
        sock.close()
