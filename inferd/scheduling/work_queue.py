"""One work queue per loaded model, drained by that model's one worker thread: the shape the
encoder batcher, the speech queue and the seq2seq scheduler share. What differs between them
is only the grouping rule (a `Rule`): which waiting entries run together, and how a group runs.

- Requests enqueue entries (one per input, each with a future on the request's event loop)
  and await them; the worker thread takes groups from the waiting entries (`Rule.take`), then
  runs every active group once (`Rule.step`: a batch runs whole, a decoder cohort one step),
  and goes round again while anything waits or runs. A lone request waits for nothing.
- An entry whose request went away (its future cancelled, or `leave`) is dropped before its
  group is taken, and a rule drops it again before each step: a client that left stops costing
  work at the next step.
- A group whose step raises fails every entry it holds, each with its own copy of the error;
  the other groups go on. A fault in the worker itself fails every entry held or waiting.
- Close: the step that runs finishes, then everything still waiting or held fails with the
  retryable ModelUnloaded. The model is never run from two threads at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from inferd.errors import InferdError, InferenceFailed, ModelUnloaded, copy_error

log = logging.getLogger("inferd.work_queue")

T = TypeVar("T")  # what one entry carries (an input, a window, ...)
G = TypeVar("G")  # what a rule runs at once (a batch, a cohort)


@dataclass(eq=False)
class Entry(Generic[T]):
    """One input of one request. `left` is set on the request's loop, `settled` on the worker."""

    item: T
    fut: asyncio.Future[Any]
    cost: int = 1
    left: bool = False
    settled: bool = False

    @property
    def gone(self) -> bool:
        """Nobody waits for its answer any more (or it has one)."""
        return self.left or self.settled or self.fut.done()

    def resolve(self, value: Any) -> None:
        self._post(value, None)

    def fail(self, exc: BaseException) -> None:
        self._post(None, exc)

    def _post(self, value: Any, error: BaseException | None) -> None:
        """From any thread: the future is set on its own loop, once."""
        if self.settled:
            return
        self.settled = True
        try:
            self.fut.get_loop().call_soon_threadsafe(_deliver, self.fut, value, error)
        except RuntimeError:  # its event loop is closed: nobody is waiting any more
            pass


def _deliver(fut: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


def _deliver_all(done: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for fut, value in done:
        if not fut.done():
            fut.set_result(value)


def resolve(entries: Sequence[Entry[Any]], results: Sequence[Any]) -> None:
    """Settle a group's entries with one wake-up of each event loop they wait on, not one per
    entry: each `call_soon_threadsafe` wakes the loop's thread (a write to its wake-up fd and
    a context switch), and a batch of 32 one-sentence requests made 32 of them, on the cores
    its next forward pass needs."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
    for e, r in zip(entries, results):
        if e.settled:
            continue
        e.settled = True
        by_loop.setdefault(e.fut.get_loop(), []).append((e.fut, r))
    for loop, done in by_loop.items():
        try:
            loop.call_soon_threadsafe(_deliver_all, done)
        except RuntimeError:  # its event loop is closed: nobody is waiting any more
            pass


def fail(entries: Sequence[Entry[Any]], exc: BaseException, what: str) -> None:
    """Every entry of a failed group gets its own copy of the error (copy_error); an error
    that is not a domain error is a bug or a runtime failure, logged once for the group."""
    if not isinstance(exc, InferdError):
        log.error("%s batch failed", what, exc_info=exc)
    for e in entries:
        e.fail(copy_error(exc, f"{what} failed"))


def check_count(out: Sequence[Any], n: int, name: str, unit: str) -> Sequence[Any]:
    if len(out) != n:
        raise InferenceFailed(f"model '{name}' returned {len(out)} results for {n} {unit}")
    return out


class Rule(Protocol[T, G]):
    """The grouping rule that makes a WorkQueue an encoder batcher, a speech queue or a
    seq2seq scheduler. Called on the worker thread only."""

    def take(self, pending: Sequence[Entry[T]], active: Sequence[G]) -> list[G]:
        """New groups to start now, from the live waiting entries (oldest first) and the groups
        already running. When nothing runs and something waits, it takes at least one entry."""
        ...

    def held(self, group: G) -> Sequence[Entry[T]]:
        """The entries the group holds: those that fail when its step raises."""
        ...

    def step(self, group: G) -> bool:
        """Run the group once, settling the entries it answered; True while it has more to do."""
        ...

    def dropped(self, n: int) -> None:
        """`n` waiting entries were dropped: their requests went away (stats)."""
        ...

    def failed(self, group: G, n: int) -> None:
        """The group's step raised, failing `n` entries (stats)."""
        ...


class OneCallBatches(Generic[T]):
    """What the rules whose group is a plain batch run by one call share (the encoder batcher,
    the speech queue): a batch holds its entries; drops and failures count in `stats`."""

    stats: Any  # .cancelled, .failed_batches

    def held(self, batch: list[Entry[T]]) -> list[Entry[T]]:
        return batch

    def dropped(self, n: int) -> None:
        self.stats.cancelled += n

    def failed(self, batch: list[Entry[T]], n: int) -> None:
        self.stats.failed_batches += 1


class OfRule:
    """A queue attribute that is its rule's (settings, stats, the runtime it drives): the
    configurations keep their attributes where callers look for them, read and set."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj.rule, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj.rule, self.name, value)


class WorkQueue(Generic[T, G]):
    """Waiting entries, the active groups and the worker thread that runs them (`what` names
    the work in error messages: "inference failed: ...")."""

    def __init__(self, rule: Rule[T, G], name: str, what: str = "inference"):
        self.rule, self.name, self.what = rule, name, what
        self.running = 0  # live entries in the step now running (/load)
        self._pending: list[Entry[T]] = []
        self._active: list[G] = []
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=f"work-{name}", daemon=True)
        self._thread.start()

    # ---- event-loop side ---------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def waiting(self) -> int:
        """Entries waiting to be taken whose requests are still there."""
        with self._cv:
            return sum(1 for e in self._pending if not e.gone)

    @property
    def active(self) -> int:
        """Groups taken and not finished (a round of batches, the live cohorts)."""
        return len(self._active)

    @property
    def busy(self) -> bool:
        return bool(self._pending or self._active)

    def enqueue(self, items: Sequence[T], costs: Sequence[int] | None = None) -> list[Entry[T]]:
        """One entry per item, waiting for the worker; raises ModelUnloaded once closed."""
        loop = asyncio.get_running_loop()
        costs = costs if costs is not None else [1] * len(items)
        entries = [Entry(it, loop.create_future(), max(1, int(c))) for it, c in zip(items, costs)]
        with self._cv:
            if self._closed:  # checked under the lock: close() then fails everything it saw
                raise ModelUnloaded(self.name)
            self._pending.extend(entries)
        # The worker is woken on the loop's next turn, not now: what requests submit in this
        # turn (the windows of several requests, a gather of submits) is taken together.
        loop.call_soon(self._wake)
        return entries

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify()

    async def gather(self, items: Sequence[T], costs: Sequence[int] | None = None) -> list[Any]:
        """Results in item order, where a failed item's result is its exception. If the
        awaiting request is cancelled (its client left), its entries are dropped."""
        if self._closed:
            raise ModelUnloaded(self.name)
        if not items:
            return []
        entries = self.enqueue(items, costs)
        try:
            if len(entries) == 1:  # one input (most requests): its future itself, no gathering future
                try:
                    return [await entries[0].fut]
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - the item's failure is its result, as with gather
                    return [e]
            return list(await asyncio.gather(*(e.fut for e in entries), return_exceptions=True))
        except asyncio.CancelledError:
            self.leave(entries)
            raise

    def leave(self, entries: Sequence[Entry[T]]) -> None:
        """The request went away: the worker drops its entries before their next step."""
        with self._cv:
            for e in entries:
                e.left = True
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()
        held = self._pending + [e for g in self._active for e in self.rule.held(g)]
        self._pending, self._active = [], []
        for e in held:
            e.fail(ModelUnloaded(self.name))

    # ---- worker thread -----------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._pending and not self._active:
                    self._cv.wait()
                if self._closed:
                    return
                try:
                    self._take()
                except Exception as exc:  # noqa: BLE001 - a fault in the rule must not leave requests hanging
                    self._fail_all(exc)
                    continue
            for g in list(self._active):
                if self._closed:
                    return
                self._step(g)

    def _take(self) -> None:
        live = [e for e in self._pending if not e.gone]
        if len(live) < len(self._pending):
            self.rule.dropped(len(self._pending) - len(live))
        self._pending = live
        if not live:
            return
        fresh = self.rule.take(live, self._active)
        taken = {id(e) for g in fresh for e in self.rule.held(g)}
        self._pending = [e for e in live if id(e) not in taken]
        self._active.extend(fresh)

    def _step(self, g: G) -> None:
        held = self.rule.held(g)
        self.running = sum(1 for e in held if not e.gone)
        try:
            more = self.rule.step(g)
        except Exception as exc:  # noqa: BLE001 - every entry of the group must hear about it
            more = False
            unsettled = [e for e in held if not e.settled]
            self.rule.failed(g, len(unsettled))
            fail(unsettled, exc, self.what)
        finally:
            self.running = 0
        if not more:
            self._active = [a for a in self._active if a is not g]  # by identity: batches are lists

    def _fail_all(self, exc: BaseException) -> None:
        held = self._pending + [e for g in self._active for e in self.rule.held(g)]
        self._pending, self._active = [], []
        fail([e for e in held if not e.settled], exc, self.what)
