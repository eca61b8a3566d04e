"""A small TTL + LRU cache (chunking responses are kept 2 minutes, as Antfly does).

Bounded three ways: entries (`max_items`), bytes (`max_bytes`, as measured by `size`), and
time: expired entries are swept by a timer, not only when read, so a burst of large
responses does not stay resident for nobody (five 25 KB chunk requests once held ~500 MB
for minutes). The timer is a daemon thread that exists only while entries do."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any


class TTLCache:
    def __init__(self, ttl: float, max_items: int, clock: Callable[[], float] = time.monotonic,
                 max_bytes: int | None = None, size: Callable[[Hashable, Any], int] | None = None):
        self.ttl, self.max_items, self.clock = ttl, max_items, clock
        self.max_bytes, self.size = max_bytes, size
        self._items: collections.OrderedDict[Hashable, tuple[float, Any, int]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self._timer: threading.Timer | None = None

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            if self.clock() >= item[0]:
                self._drop(key)
                return None
            self._items.move_to_end(key)
            return item[1]

    def put(self, key: Hashable, value: Any) -> None:
        nbytes = self.size(key, value) if self.size is not None else 0
        with self._lock:
            if key in self._items:
                self._drop(key)
            if self.max_bytes is not None and nbytes > self.max_bytes:
                return  # larger than the whole cache: not kept
            self._items[key] = (self.clock() + self.ttl, value, nbytes)
            self.bytes += nbytes
            while len(self._items) > self.max_items or (self.max_bytes is not None and self.bytes > self.max_bytes):
                self._drop(next(iter(self._items)))
            self._schedule()

    def sweep(self) -> None:
        """Drop every expired entry."""
        with self._lock:
            now = self.clock()
            for key in [k for k, (exp, _, _) in self._items.items() if now >= exp]:
                self._drop(key)

    def _drop(self, key: Hashable) -> None:
        self.bytes -= self._items.pop(key)[2]

    def _schedule(self) -> None:  # under the lock
        if self._timer is not None or not self._items:
            return
        delay = max(0.01, min(exp for exp, _, _ in self._items.values()) - self.clock())
        self._timer = threading.Timer(delay, self._on_timer)
        self._timer.daemon = True
        self._timer.start()

    def _on_timer(self) -> None:
        self.sweep()
        with self._lock:
            self._timer = None
            self._schedule()
