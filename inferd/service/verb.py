"""The one pipeline of the model verbs (embed, image embed, rerank, read, rewrite, extract,
transcribe): what each of them used to repeat, configured per verb instead of copied.

    resolve    the served name -> spec (the verb's own rule: catalog.resolve, reading's spec_for)
    admit      an admission slot (its weight: media bytes for image verbs), then media, if any
    hold       `registry.use(name, KIND)`: the kind's typed handle, timed (load_seconds)
    prepare    tokenize / preprocess: on the event loop when small, else on a worker thread
    submit     the prepared items that are not errors to the model's scheduler, in one submission
    per item   with per_item an item's failure is that item's error; without, the first one
               (a bad input before any model work, a bad item after preparing, a failed
               inference) is the whole request's error

A `Verb` is the configuration: the kind it runs (its handle type follows from it), the
registry and admission it runs under, and its per-item policy (what a non-domain exception of
one item becomes). Its `use()` is admit + hold; `each()` is prepare + submit + per item."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from inferd.errors import InferdError, InvalidInput

if TYPE_CHECKING:
    from inferd.registry.registry import Registry, TypedKind
    from inferd.scheduling.admission import Admission

H = TypeVar("H")
P = TypeVar("P")
T = TypeVar("T")

INLINE_CHARS = 2000  # inputs this small are prepared on the event loop (a thread hop costs more)


async def off_loop(fn: Callable[[], T], chars: int | None) -> T:
    """`fn()` (tokenizing, decoding spans) on a worker thread, unless its inputs are small
    (`chars`: their size; None: always on a thread, as for decoded images)."""
    return fn() if chars is not None and chars <= INLINE_CHARS else await asyncio.to_thread(fn)


def _as_error(x: Any) -> InferdError | None:
    return x if isinstance(x, InferdError) else None


def raise_first(items: Iterable[P], per_item: bool, error_of: Callable[[P], InferdError | None] = _as_error) -> None:
    """The per-item policy's request half: without per_item, the first item that is (or holds)
    an error fails the whole request; with it, nothing happens here."""
    if per_item:
        return
    for x in items:
        err = error_of(x)
        if err is not None:
            raise err


def total_chars(items: Iterable[Any]) -> int:
    """Characters of the text items (what decides whether preparing them is worth a thread hop)."""
    return sum(len(x) for x in items if isinstance(x, str))


async def submit_by_length(handle: Any, items: list[Any]) -> list[Any]:
    """An encoder's dynamic batcher, each item costing its length (tokens): per item its output
    or its exception."""
    return list(await handle.scheduler.submit_each(items, [len(x) for x in items]))


@dataclass
class Held(Generic[H]):
    """A model held for one request: its typed handle and how long the request waited for it
    to load (0 when it was loaded already)."""

    handle: H
    load_seconds: float


@dataclass
class Ran(Generic[P]):
    """What `Verb.each` did: every prepared item in input order (an error in place for those
    that failed to prepare), the outputs of those that ran, and the errors of those that failed
    to run (with per_item only: without it the first failure was raised)."""

    prepared: list[P]
    done: list[tuple[int, Any]] = field(default_factory=list)
    failed: list[tuple[int, InferdError]] = field(default_factory=list)


@dataclass(frozen=True)
class Verb(Generic[H]):
    """One verb's configuration: the kind it runs (which types its handle), where it runs, and
    its per-item policy: `failed` turns an item's non-domain exception into its error."""

    kind: TypedKind[H]
    registry: Registry
    admission: Admission
    failed: Callable[[BaseException], InferdError] = lambda e: InvalidInput(str(e))

    def slot(self, weight: int = 1) -> contextlib.AbstractAsyncContextManager[None]:
        """The admission slot alone: for verbs that admit media (or resolve the name) between
        the slot and the model."""
        return self.admission.slot(weight)

    @contextlib.asynccontextmanager
    async def hold(self, name: str, keep_alive: float | None = None) -> AsyncIterator[Held[H]]:
        """The loaded model `name` of this verb's kind, held while the block runs."""
        t0 = time.perf_counter()
        async with self.registry.use(name, self.kind, keep_alive) as handle:
            yield Held(handle, time.perf_counter() - t0)

    @contextlib.asynccontextmanager
    async def use(self, name: str, keep_alive: float | None = None, *, weight: int = 1) -> AsyncIterator[Held[H]]:
        """An admission slot, then the model: the common case."""
        async with self.slot(weight), self.hold(name, keep_alive) as held:
            yield held

    async def each(self, handle: H, prepare: Callable[[], list[P]], chars: int | None, per_item: bool,
                   submit: Callable[[H, list[P]], Awaitable[list[Any]]] = submit_by_length,
                   error_of: Callable[[P], InferdError | None] = _as_error) -> Ran[P]:
        """Prepare the items (`chars`: their size, for the thread decision), apply the per-item
        policy to those that failed to prepare, submit the others in one submission (per item
        its output or its exception) and apply the policy to those that failed to run."""
        prepared = await off_loop(prepare, chars)
        raise_first(prepared, per_item, error_of)
        ok = [i for i, x in enumerate(prepared) if error_of(x) is None]
        ran = Ran(prepared)
        for i, out in zip(ok, await submit(handle, [prepared[i] for i in ok])):
            if not isinstance(out, BaseException):
                ran.done.append((i, out))
            elif not per_item:
                raise out
            else:
                ran.failed.append((i, out if isinstance(out, InferdError) else self.failed(out)))
        return ran


def items_of(ran: Ran[Any], value: Callable[[int, Any], Any] = lambda i, out: out) -> list[Any]:
    """The verb's per-input results, in input order: `value(i, output)` for those that ran, the
    error for the others."""
    items: list[Any] = list(ran.prepared)
    for i, err in ran.failed:
        items[i] = err
    for i, out in ran.done:
        items[i] = value(i, out)
    return items


__all__ = ["INLINE_CHARS", "Held", "Ran", "Verb", "items_of", "off_loop", "raise_first", "submit_by_length",
           "total_chars"]
