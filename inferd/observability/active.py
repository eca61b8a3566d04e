"""What the operator sees of the server right now: the requests in flight (with a Cancel), and
a bounded log of recent errors.

`ActiveRequests` holds each running request's RequestInfo (context.py), put there by the
Observe middleware when the request starts and taken out when its response is over; the
admission queue marks it queued, a generation registers itself on it (tokens so far, and
what Cancel stops). Nothing is computed until the list is asked for.

`ErrorLog` keeps the last N error responses (status >= 400: time, route, status, the error
message of the envelope) and the server's own ERROR log records (a stream that failed after
its first byte is a 200 with an error frame; its log record is what tells). No request
bodies are kept: only the message the server itself wrote."""

from __future__ import annotations

import collections
import itertools
import json
import logging
import threading
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from inferd.logs import request_id
from inferd.observability.context import RequestInfo

MAX_MESSAGE = 500  # characters of an error message kept in the log


@dataclass
class Active:
    id: str
    method: str
    path: str
    client: str | None
    scope: MutableMapping[str, Any]  # the ASGI scope: the router writes the matched route into it later
    info: RequestInfo
    started: float  # unix seconds


def route_of(scope: MutableMapping[str, Any]) -> str:
    """The matched route's template (`/admin/requests/{id}/cancel`), or the path before routing."""
    return getattr(scope.get("route"), "path", None) or scope["path"]


class ActiveRequests:
    """The requests in flight, by request id (the X-Request-ID the server answers with)."""

    def __init__(self) -> None:
        self._live: dict[str, Active] = {}
        self._seq = itertools.count(1)

    def add(self, rid: str, scope: MutableMapping[str, Any], info: RequestInfo) -> str:
        """Register a request; returns its key (the id, made unique if a client reused one)."""
        key = rid if rid not in self._live else f"{rid}.{next(self._seq)}"
        client = scope.get("client")
        self._live[key] = Active(key, scope["method"], scope["path"],
                                 f"{client[0]}:{client[1]}" if client else None, scope, info, time.time())
        return key

    def remove(self, key: str) -> None:
        self._live.pop(key, None)

    def __len__(self) -> int:
        return len(self._live)

    def view(self) -> list[dict[str, Any]]:
        now = time.time()
        out: list[dict[str, Any]] = []
        for a in sorted(self._live.values(), key=lambda a: a.started):
            info = a.info
            tokens = sum(w.generated() for w in info.work) if info.work else None
            # queued: waiting for an admission slot, or for an engine slot (its generation submitted)
            waiting = info.queued or (bool(info.work) and all(w.waiting() for w in info.work))
            state = "cancelling" if info.cancelled else "queued" if waiting else "running"
            out.append({"id": a.id, "method": a.method, "route": route_of(a.scope), "path": a.path,
                        "model": info.model, "family": info.family, "client": a.client,
                        "started": round(a.started, 3), "age_s": round(now - a.started, 3), "state": state,
                        "tokens": tokens, "cancellable": bool(info.work) or info.interrupt is not None})
        return out

    def get(self, key: str) -> Active | None:
        return self._live.get(key)

    def cancel(self, key: str) -> bool:
        """Stop request `key`: its generations end at the next engine step (a stream ends with
        its normal `cancelled` finish, a whole answer becomes the cancelled error), and work
        that has no generation yet (queued, preparing, another kind's call) is interrupted
        the way a client leaving interrupts it. False: it has nothing that can be stopped."""
        a = self._live[key]
        info = a.info
        if not info.work and info.interrupt is None:
            return False
        info.cancelled = True
        if info.work:
            for w in info.work:
                w.cancel()
        elif info.interrupt is not None:
            info.interrupt()
        return True


def error_message(body: bytes) -> str:
    """The message of an error envelope of any API family (OpenAI's error.message, Ollama's
    error string, Antfly's message), or the start of the body when it is not one."""
    try:
        obj = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:MAX_MESSAGE]
    msg: Any = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict):
            msg = err.get("message")
        elif isinstance(err, str):
            msg = f"{err}: {obj['message']}" if isinstance(obj.get("message"), str) else err
        if msg is None:
            msg = obj.get("message") or obj.get("detail")
    return str(msg if msg is not None else obj)[:MAX_MESSAGE]


class ErrorLog:
    """A ring of the last `size` errors (oldest dropped). Thread-safe: log records come from
    the engines' worker threads too."""

    def __init__(self, size: int = 200):
        self._ring: collections.deque[dict[str, Any]] = collections.deque(maxlen=size)
        self._lock = threading.Lock()
        self.total = 0

    def add(self, **entry: Any) -> None:
        entry.setdefault("time", round(time.time(), 3))
        with self._lock:
            self._ring.append(entry)
            self.total += 1

    def response(self, method: str, path: str, route: str, status: int, body: bytes, request_id: str) -> None:
        self.add(source="response", method=method, path=path, route=route, status=status,
                 message=error_message(body) if body else "", request_id=request_id)

    def view(self) -> dict[str, Any]:
        with self._lock:
            items = list(self._ring)
        return {"errors": items[::-1], "total": self.total, "kept": self._ring.maxlen}  # newest first


class ErrorLogHandler(logging.Handler):
    """ERROR records of the server's own loggers into an ErrorLog: the logger, the message and
    the exception's type and text (not the traceback: the server's log has that)."""

    def __init__(self, errors: ErrorLog):
        super().__init__(logging.ERROR)
        self.errors = errors

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                e = record.exc_info[1]
                msg = f"{msg}: {type(e).__name__}: {e}"
            self.errors.add(source="log", logger=record.name, level=record.levelname.lower(),
                            message=msg[:MAX_MESSAGE], request_id=getattr(record, "request_id", None) or request_id.get(),
                            time=round(record.created, 3))
        except Exception:  # a log handler must never raise into the code that logged
            self.handleError(record)
