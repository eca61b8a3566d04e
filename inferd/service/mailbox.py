"""Deltas from the engine's worker threads to an event loop, with at most one wake-up of
that loop pending at a time.

Every `call_soon_threadsafe` wakes the loop's thread (a self-pipe write), and on a small
machine that thread then takes a core from llama.cpp's compute threads in the middle of the
next decode: measured on 2 cores, one wake per token cost a single stream about 1-2 ms per
token against llama-server. So the deltas of one engine step share one wake-up (the first
post schedules a drain; later posts before it runs only append), and a request that is not
streamed wakes the loop only with its final delta (nothing on the loop needs the others
sooner: the engine itself watches cancellation and timing). "Share": the engine's worker
holds the wake-up back until the step's last delta is posted (inferd/scheduling/wakeups.py),
so the loop never drains part of a step while the worker still samples the rest."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any

from inferd.scheduling.wakeups import defer


class LoopMailbox:
    _boxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopMailbox] = weakref.WeakKeyDictionary()
    _boxes_lock = threading.Lock()

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._items: list[tuple[Callable[[Any], None], Any]] = []
        self._lock = threading.Lock()
        self._scheduled = False
        self.wakeups = 0  # loop wake-ups asked for (at most one per engine step)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> LoopMailbox:
        with cls._boxes_lock:
            box = cls._boxes.get(loop)
            if box is None:
                box = cls._boxes[loop] = cls(loop)
            return box

    def post(self, fn: Callable[[Any], None], arg: Any, wake: bool = True) -> None:
        """Run fn(arg) on the loop, in posting order. `wake=False`: not before the next post
        that wakes it. Raises RuntimeError once the loop is closed (the listener is gone)."""
        if self.loop.is_closed():
            raise RuntimeError("event loop is closed")
        with self._lock:
            self._items.append((fn, arg))
            if self._scheduled or not wake:
                return
            self._scheduled = True
        # inside an engine step the wake-up waits for the step's last delta (wakeups.py)
        if not defer(self, self._wake):
            self._wake()

    def _wake(self) -> None:
        self.wakeups += 1
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except BaseException:
            with self._lock:
                self._scheduled = False
            raise

    def _drain(self) -> None:
        with self._lock:
            items, self._items, self._scheduled = self._items, [], False
        for fn, arg in items:
            fn(arg)
