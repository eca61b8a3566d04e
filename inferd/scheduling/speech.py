"""The per-model speech queue: windows (<= 30 s chunks of audio) of every request wait here,
and the model's one worker thread decodes them in batches, so concurrent requests share one
loaded model and one encoder pass instead of a model copy each.

- A batch is the oldest waiting window plus the windows waiting with the same decode options
  (task, beam size, temperatures, timestamps, prompt; languages may differ), up to
  `max_batch`, oldest first: no request starves, and a long file's windows batch together.
- A window whose request went away (its future cancelled) is dropped before its batch runs:
  a client that disconnects stops costing work at the next window.
- If a batch raises, every window in it fails with the error; the worker goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from inferd.errors import ModelUnloaded
from inferd.scheduling.futures import check_count, fail, fail_unloaded, resolve

log = logging.getLogger("inferd.speech")


class SpeechRuntime(Protocol):
    """What the queue drives (runtimes/speech satisfies it structurally)."""

    rate: int
    multilingual: bool

    @property
    def capabilities(self) -> frozenset[str]: ...
    def check(self, opts: Any, language: str | None) -> None: ...
    def decode_batch(self, chunks: Sequence[Any], opts: Any) -> list[Any]: ...
    def close(self) -> None: ...


@dataclass
class _Entry:
    chunk: Any
    opts: Any
    fut: asyncio.Future


@dataclass
class SpeechStats:
    batches: int = 0
    windows: int = 0
    cancelled: int = 0
    failed_batches: int = 0
    largest_batch: int = 0


class SpeechQueue:
    def __init__(self, runtime: SpeechRuntime, max_batch: int = 8, name: str = "speech"):
        self.runtime, self.max_batch, self.name = runtime, max(1, max_batch), name
        self._pending: list[_Entry] = []
        self._worker: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"speech-{name}")
        self.stats = SpeechStats()
        self.closed = False

    def submit(self, chunks: Sequence[Any], opts: Any) -> list[asyncio.Future]:
        """One future per window, resolved in any order; cancel a future to drop its window."""
        if self.closed:
            raise ModelUnloaded(self.name)
        loop = asyncio.get_running_loop()
        entries = [_Entry(c, opts, loop.create_future()) for c in chunks]
        self._pending.extend(entries)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return [e.fut for e in entries]

    def _take(self) -> list[_Entry]:
        live = [e for e in self._pending if not e.fut.done()]
        self.stats.cancelled += len(self._pending) - len(live)
        if not live:
            self._pending = []
            return []
        key = live[0].opts
        batch = [e for e in live if e.opts == key][: self.max_batch]
        taken = {id(e) for e in batch}
        self._pending = [e for e in live if id(e) not in taken]
        return batch

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch = self._take()
            if not batch:
                break
            try:
                out = await loop.run_in_executor(self._executor, self._run, batch)
            except BaseException as exc:  # noqa: BLE001 - every window of the batch must hear about it
                self.stats.failed_batches += 1
                fail([e.fut for e in batch], exc, log, "transcription")
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            self.stats.batches += 1
            self.stats.windows += len(batch)
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
            resolve([e.fut for e in batch], out)

    def _run(self, batch: list[_Entry]) -> list[Any]:
        return list(check_count(self.runtime.decode_batch([e.chunk for e in batch], batch[0].opts),
                                len(batch), self.name, "windows"))

    def close(self) -> None:
        self.closed = True
        fail_unloaded([e.fut for e in self._pending], self.name)
        self._pending = []
        self._executor.shutdown(wait=True)

