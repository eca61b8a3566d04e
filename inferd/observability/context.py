"""What one HTTP request did, collected as it runs: the model it used, its wait in the
admission queue, the tokens it computed, and spans (queue, load, prefill, decode) for
tracing. The middleware (api/observe.py) opens one per request in a context variable; the
engine layers call the note_* functions, which do nothing outside a request (tests,
batch items run by the service itself)."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestInfo:
    family: str
    start_ns: int = field(default_factory=time.time_ns)
    model: str | None = None
    queue_seconds: float = 0.0
    admitted_at: float | None = None          # perf_counter when admission let it run
    compute_tokens: int = 0
    spans: list[tuple[str, int, int]] = field(default_factory=list)  # (name, start ns, end ns), wall clock
    # For the operator's list of active requests (active.py) and its Cancel:
    queued: bool = False                      # waiting in the admission queue now
    work: list[Any] = field(default_factory=list)  # running generations (cancel(), generated(), waiting())
    interrupt: Callable[[], None] | None = None    # cancels the request's task while it waits or computes
    cancelled: bool = False                   # the operator cancelled it (POST /admin/requests/{id}/cancel)


# Where the Observe middleware leaves a request's RequestInfo in the ASGI scope, for the
# outermost middleware (RequestContext), which counts the request once with its model.
SCOPE_KEY = "inferd.request_info"

_current: contextvars.ContextVar[RequestInfo | None] = contextvars.ContextVar("inferd_request", default=None)


def begin(info: RequestInfo) -> contextvars.Token:
    return _current.set(info)


def end(token: contextvars.Token) -> None:
    _current.reset(token)


def current() -> RequestInfo | None:
    return _current.get()


def note_queued() -> None:
    """The request waits for an admission slot (admitted: note_admitted)."""
    info = _current.get()
    if info is not None:
        info.queued = True


def note_work(stream: Any) -> None:
    """A generation of this request started: the operator's Cancel stops it, and its tokens
    so far show in the list of active requests."""
    info = _current.get()
    if info is not None:
        info.work.append(stream)
        if info.cancelled:  # cancelled while it was being prepared
            stream.cancel()


def note_admitted(waited: float) -> None:
    info = _current.get()
    if info is not None:
        info.queued = False
        now_ns = time.time_ns()
        info.queue_seconds += waited
        info.admitted_at = time.perf_counter()
        info.spans.append(("queue", now_ns - int(waited * 1e9), now_ns))


def note_model(name: str, load_start_ns: int | None = None) -> None:
    """The request uses model `name`; a load wait longer than a millisecond becomes a span."""
    info = _current.get()
    if info is not None:
        info.model = name
        if load_start_ns is not None:
            now_ns = time.time_ns()
            if now_ns - load_start_ns > 1_000_000:
                info.spans.append(("load", load_start_ns, now_ns))


def note_tokens(n: int) -> None:
    info = _current.get()
    if info is not None:
        info.compute_tokens += int(n)


def note_generation(prompt_tokens: int, completion_tokens: int, t_admitted: float, t_first: float,
                    t_last: float) -> None:
    """A finished sequence: its tokens, and prefill / decode spans from the engine's
    perf_counter times (converted to wall clock)."""
    info = _current.get()
    if info is None:
        return
    info.compute_tokens += prompt_tokens + completion_tokens
    if t_admitted and t_first:
        off = time.time_ns() - int(time.perf_counter() * 1e9)
        ns = lambda t: off + int(t * 1e9)  # noqa: E731
        info.spans.append(("prefill", ns(t_admitted), ns(t_first)))
        if t_last > t_first:
            info.spans.append(("decode", ns(t_first), ns(t_last)))
