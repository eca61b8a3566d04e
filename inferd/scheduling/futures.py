"""What the per-model queues that hand work to one worker thread share (the encoder batcher,
the speech queue): settling each request's future from a batch's outcome. Each function
skips futures already done (a request that went away, or one already answered)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from inferd.errors import InferdError, InferenceFailed, ModelUnloaded, copy_error


def resolve(futs: Iterable[asyncio.Future], results: Sequence[Any]) -> None:
    for fut, r in zip(futs, results):
        if not fut.done():
            fut.set_result(r)


def fail(futs: Iterable[asyncio.Future], exc: BaseException, log: logging.Logger, what: str) -> None:
    """Every future of a failed batch gets its own copy of the error (copy_error); an error
    that is not a domain error is a bug or a runtime failure, logged once for the batch."""
    if not isinstance(exc, InferdError):
        log.error("%s batch failed", what, exc_info=exc)
    for fut in futs:
        if not fut.done():
            fut.set_exception(copy_error(exc, f"{what} failed"))


def fail_unloaded(futs: Iterable[asyncio.Future], name: str) -> None:
    """On close (from any thread): each waiting future fails with the retryable ModelUnloaded
    on its own loop."""
    for fut in futs:
        if not fut.done():
            fut.get_loop().call_soon_threadsafe(_unloaded, fut, name)


def check_count(out: Sequence[Any], n: int, name: str, unit: str) -> Sequence[Any]:
    if len(out) != n:
        raise InferenceFailed(f"model '{name}' returned {len(out)} results for {n} {unit}")
    return out


def _unloaded(fut: asyncio.Future, name: str) -> None:
    if not fut.done():
        fut.set_exception(ModelUnloaded(name))
