"""The host-RAM prompt cache beyond the slots (llama-server's `--cache-ram`).

A slot's cached sequence is about to be overwritten by a new prompt that shares little of
it: its KV state is copied to host memory first (llama_state_seq_get_data through the
backend), keyed by its tokens. A later prompt sharing a longer prefix with a saved state than
with any slot gets that state restored into its slot and prefills only the rest, so many
returning conversations on few slots do not re-prefill their histories. Bounded in bytes,
least recently used out first; a state that is a prefix of a newer one is superseded."""

from __future__ import annotations

import collections
from collections.abc import Callable


def _common(a: list[int] | tuple[int, ...], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class HostCache:
    MIN_TOKENS = 32  # shorter sequences are cheaper to prefill again than to copy around

    def __init__(self, capacity_bytes: int):
        self.capacity = capacity_bytes
        self.used = 0
        self._entries: collections.OrderedDict[tuple[int, ...], bytes] = collections.OrderedDict()
        self.saves = self.restores = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, tokens: list[int], data: bytes) -> None:
        key = tuple(tokens)
        if len(data) > self.capacity or len(key) < self.MIN_TOKENS:
            return
        for old in [k for k in self._entries if len(k) <= len(key) and key[:len(k)] == k]:
            self.used -= len(self._entries.pop(old))  # superseded by this longer sequence
        while self._entries and self.used + len(data) > self.capacity:
            _k, v = self._entries.popitem(last=False)
            self.used -= len(v)
        self._entries[key] = data
        self.used += len(data)
        self.saves += 1

    def best(self, prompt: list[int], limit: int,
             floor: Callable[[int], int] | None = None) -> tuple[int, tuple[int, ...] | None]:
        """(tokens of `prompt` the best saved state covers, at most `limit`; its key). `floor(n)`:
        the shortest prefix a state of n tokens can be cut back to (sliding-window models)."""
        best, hit = 0, None
        for k in self._entries:
            n = min(_common(k, prompt), limit)
            if n > best and (floor is None or n >= floor(len(k))):
                best, hit = n, k
        return best, hit

    def take(self, key: tuple[int, ...]) -> bytes:
        """The state saved under `key`, removed (it goes back into a slot, which holds it now)."""
        data = self._entries.pop(key)
        self.used -= len(data)
        self.restores += 1
        return data
