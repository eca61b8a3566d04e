"""Run one HTTP request through an ASGI app in-process and stream its response: how a model
replica serves the request its ingress forwarded, with inferd's own app (the same routes,
converters and error envelopes as a single server). Pure asyncio; no Ray here.

The response comes back as a ("start", status, headers) item followed by body chunks. When
the consumer stops iterating (the client left, the ingress cancelled the call), the app sees
`http.disconnect`, which makes inferd cancel the sequence at its next step."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

Headers = list[tuple[str, str]]


@dataclass
class ForwardedRequest:
    """What the ingress sends to a replica: plain data, so it pickles across nodes."""

    method: str
    path: str
    query_string: str = ""
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    affinity: str | None = None   # prompt_cache_key or prompt-prefix hash: the router's hint


async def run_asgi(app: Any, req: ForwardedRequest) -> AsyncIterator[Any]:
    """Yield ("start", status, headers), then each non-empty body chunk."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": req.method,
             "scheme": "http", "path": req.path, "raw_path": req.path.encode(), "root_path": "",
             "query_string": req.query_string.encode(),
             "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in req.headers],
             "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 80)}
    out: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    gone = asyncio.Event()
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": req.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
            await out.put(("start", (message["status"], headers)))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                await out.put(("body", message["body"]))
            if not message.get("more_body", False):
                await out.put(("end", None))

    async def call() -> None:
        try:
            await app(scope, receive, send)
        except BaseException as e:  # the app's own error handlers answer request errors; this is a bug
            await out.put(("crash", e))
            raise
        finally:
            await out.put(("end", None))

    task = asyncio.ensure_future(call())
    try:
        while True:
            kind, value = await out.get()
            if kind == "start":
                yield ("start", *value)
            elif kind == "body":
                yield value
            elif kind == "crash":
                raise value
            else:
                return
    finally:
        gone.set()  # the app sees http.disconnect: a running generation is cancelled
        if not task.done():
            with contextlib.suppress(asyncio.TimeoutError, BaseException):
                await asyncio.wait_for(asyncio.shield(task), 10)
