"""Wake-ups of event loops held back to the end of an engine step.

The generation worker emits one delta per sequence after each decode (sampling them one by
one). A listener that woke its event loop at the first of them let the loop's thread start
draining while the worker still sampled the others: on 2 cores the two then traded the GIL
at every ctypes call of the sampling loop (each native call releases it, and getting it
back waits for the loop's thread), the loop woke again for the deltas posted after its
drain, and a 16-stream step could wake it up to 16 times. Inside `step_wakeups()` a
listener registers its wake-up here instead; the step ends, the wake-ups run once each (in
the order they were first asked for), and the loop's work overlaps the next decode, which
holds no GIL.

A thread-local, so only the worker thread that opened the block defers; any other thread
(or the worker outside a step: admission errors, cancellations) wakes at once."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger("inferd.wakeups")
_local = threading.local()


@contextlib.contextmanager
def step_wakeups() -> Iterator[None]:
    """Defer the wake-ups asked for on this thread until the block ends (not nested: an
    inner block joins the outer one)."""
    if getattr(_local, "pending", None) is not None:
        yield
        return
    pending: dict[int, Callable[[], None]] = {}
    _local.pending = pending
    try:
        yield
    finally:
        _local.pending = None
        for wake in pending.values():
            try:
                wake()
            except Exception:  # a closed loop: its listener's next post fails and cancels it
                log.debug("a deferred wake-up failed", exc_info=True)


def defer(key: object, wake: Callable[[], None]) -> bool:
    """Register `wake` (once per `key`) to run when this thread's step ends. False outside
    a step: the caller wakes now."""
    pending = getattr(_local, "pending", None)
    if pending is None:
        return False
    pending.setdefault(id(key), wake)
    return True
