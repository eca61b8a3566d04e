"""The dynamic batcher on its own: grouping by token budget, one forward pass per batch,
cancelled entries skipped, a failing batch fails only its own entries."""

import asyncio
import threading

import pytest

from inferd.errors import InferenceFailed, InvalidInput, ModelUnloaded
from inferd.scheduling.batcher import Batcher, plan


def test_plan_sorts_by_length_and_respects_the_budget():
    costs = [10, 3, 50, 4, 11, 200]
    batches = plan(costs, max_tokens=40, max_items=100)
    assert [[costs[i] for i in b] for b in batches] == [[3, 4, 10], [11], [50], [200]]
    for b in batches:
        assert len(b) == 1 or len(b) * max(costs[i] for i in b) <= 40
    assert plan([1] * 10, max_tokens=1000, max_items=4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


class Model:
    """Records each forward pass; blocks on the first so that others queue up behind it."""

    def __init__(self, fail_on=None):
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        self.fail_on = fail_on
        self.threads = set()

    def run(self, items):
        self.threads.add(threading.get_ident())
        if not self.calls:
            self.gate.wait(5)
        self.calls.append(list(items))
        if self.fail_on in items:
            raise RuntimeError("boom")
        return [x.upper() for x in items]


async def test_concurrent_requests_share_forward_passes():
    m = Model()
    b = Batcher(m.run, max_tokens=1000, max_items=100, name="t")
    first = asyncio.create_task(b.submit(["a"], [1]))
    await asyncio.sleep(0.05)  # "a" is running alone; the rest queue behind it
    rest = [asyncio.create_task(b.submit([f"x{i}"], [2])) for i in range(31)]
    await asyncio.sleep(0.05)
    m.gate.set()
    assert await first == ["A"]
    assert [(await r)[0] for r in rest] == [f"X{i}" for i in range(31)]
    assert len(m.calls) == 2 and len(m.calls[1]) == 31   # 32 requests, 2 forward passes
    assert len(m.threads) == 1 and b.stats.batches == 2
    b.close()


async def test_cancelled_entries_are_skipped():
    m = Model()
    b = Batcher(m.run, name="t")
    first = asyncio.create_task(b.submit(["a"], [1]))
    await asyncio.sleep(0.05)
    gone = asyncio.create_task(b.submit(["gone"], [1]))
    kept = asyncio.create_task(b.submit(["kept"], [1]))
    await asyncio.sleep(0.02)
    gone.cancel()
    m.gate.set()
    assert await kept == ["KEPT"] and await first == ["A"]
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert ["gone"] not in m.calls and all("gone" not in c for c in m.calls)
    assert b.stats.cancelled == 1
    b.close()


async def test_a_failing_batch_fails_only_its_entries():
    m = Model(fail_on="bad")
    m.gate.set()
    b = Batcher(m.run, max_tokens=4, max_items=100, name="t")  # cost 2 each: two per batch
    tasks = [asyncio.create_task(b.submit_each([x], [2])) for x in ["ok1", "bad", "ok2", "ok3"]]
    res = [(await t)[0] for t in tasks]
    errs = [r for r in res if isinstance(r, BaseException)]
    oks = [r for r in res if not isinstance(r, BaseException)]
    assert len(errs) == 2 and all(isinstance(e, InferenceFailed) and "boom" in e.message for e in errs)
    assert errs[0] is not errs[1]  # one error object per entry
    assert len(oks) == 2 and all(o.startswith("OK") for o in oks)
    with pytest.raises(InferenceFailed):
        await b.submit(["bad"], [1])
    b.close()


async def test_domain_errors_pass_through_and_closed_batcher_refuses():
    def run(items):
        raise InvalidInput("no such thing", "input")
    b = Batcher(run, name="t")
    with pytest.raises(InvalidInput, match="no such thing"):
        await b.submit(["x"], [1])
    b.close()
    with pytest.raises(ModelUnloaded, match="unloaded") as e:  # the same retryable answer as the engine's
        await b.submit(["x"], [1])
    assert e.value.retryable
