"""A small TTL + LRU cache (chunking responses are kept 2 minutes, as Antfly does)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any


class TTLCache:
    def __init__(self, ttl: float, max_items: int, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.max_items, self.clock = ttl, max_items, clock
        self._items: collections.OrderedDict[Hashable, tuple[float, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            if self.clock() >= item[0]:
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return item[1]

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = (self.clock() + self.ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
