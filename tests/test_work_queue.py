"""The generic per-model work queue (scheduling/work_queue.py) with a small step-wise rule:
what the encoder batcher, the speech queue and the seq2seq scheduler inherit from it — same-turn
submissions taken together, a request that left dropped before the next step, a failing step
or a faulty rule failing every entry it holds, close failing what waits or runs with
ModelUnloaded."""

import asyncio
import threading

import pytest

from inferd.errors import InferenceFailed, ModelUnloaded
from inferd.scheduling.work_queue import Entry, WorkQueue


class Countdown:
    """Each group is every waiting entry; a step subtracts one from each live entry's count and
    answers those that reach 0 with the number of steps they took."""

    def __init__(self, fail_take=False, fail_at_step=None, gate=None):
        self.steps = 0
        self.taken: list[list[int]] = []
        self.cancelled = self.failed_entries = 0
        self.fail_take, self.fail_at_step, self.gate = fail_take, fail_at_step, gate
        self.left: dict[int, int] = {}

    def take(self, pending, active):
        if self.fail_take:
            raise RuntimeError("a bug in the rule")
        if active:
            return []
        self.taken.append([e.item for e in pending])
        for e in pending:
            self.left[id(e)] = e.item
        return [list(pending)]

    def held(self, group):
        return group

    def step(self, group):
        if self.gate is not None:
            self.gate.wait(5)
        self.steps += 1
        if self.steps == self.fail_at_step:
            raise RuntimeError("the accelerator caught fire")
        live = [e for e in group if not e.gone]  # one snapshot: an entry that leaves later counts next step
        for e in group:
            if not e.settled and e not in live and id(e) in self.left:
                del self.left[id(e)]  # counted once
                self.cancelled += 1
        for e in live:
            self.left[id(e)] -= 1
            if self.left[id(e)] == 0:
                e.resolve(self.steps)
        return any(not e.settled for e in live)  # one that left meanwhile is counted at the next step

    def dropped(self, n):
        self.cancelled += n

    def failed(self, group, n):
        self.failed_entries += n


async def idle(q, seconds=5.0):
    """The worker has dropped its groups (it answers an entry before it drops the group)."""
    for _ in range(int(seconds * 100)):
        if not q.busy:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the queue stayed busy")


async def test_one_turn_of_submissions_is_taken_together_and_stepped_to_the_end():
    rule = Countdown()
    q = WorkQueue(rule, "t")
    try:
        a = asyncio.create_task(q.gather([1, 3]))
        b = asyncio.create_task(q.gather([2]))
        assert await a == [1, 3] and await b == [2]
        assert rule.taken == [[1, 3, 2]] and rule.steps == 3
        await idle(q)
    finally:
        q.close()


async def test_a_request_that_leaves_stops_costing_steps():
    rule = Countdown()
    q = WorkQueue(rule, "t")
    try:
        long = asyncio.create_task(q.gather([10_000_000]))
        while not rule.steps:
            await asyncio.sleep(0.001)
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        await idle(q)
        assert rule.cancelled == 1
        steps = rule.steps
        await asyncio.sleep(0.05)
        assert rule.steps == steps  # nothing runs for nobody
        assert await q.gather([2]) == [steps + 2]  # and the queue goes on
    finally:
        q.close()


async def test_a_failing_step_fails_every_entry_it_holds_and_the_queue_goes_on():
    rule = Countdown(fail_at_step=2)
    q = WorkQueue(rule, "t")
    try:
        out = await q.gather([1, 5, 6])
        assert out[0] == 1  # answered at step 1, before the failure
        assert [type(x) for x in out[1:]] == [InferenceFailed, InferenceFailed]
        assert "inference failed: the accelerator caught fire" in str(out[1]) and out[1] is not out[2]
        assert rule.failed_entries == 2
        assert await q.gather([1]) == [3]
    finally:
        q.close()


async def test_a_fault_in_the_rule_fails_every_waiting_entry():
    rule = Countdown(fail_take=True)
    q = WorkQueue(rule, "t")
    try:
        out = await asyncio.wait_for(q.gather([1, 2]), 5)
        assert all(isinstance(x, InferenceFailed) and "a bug in the rule" in str(x) for x in out)
        await idle(q)
    finally:
        q.close()


async def test_close_lets_the_running_step_finish_then_fails_what_waits_or_runs():
    gate = threading.Event()
    rule = Countdown(gate=gate)
    q = WorkQueue(rule, "t")
    running = asyncio.create_task(q.gather([1, 2]))  # 1 answers at the first step, 2 would need another
    while not q.running:
        await asyncio.sleep(0.001)
    waiting = asyncio.create_task(q.gather([1]))
    await asyncio.sleep(0.01)
    threading.Timer(0.05, gate.set).start()
    await asyncio.to_thread(q.close)
    first, second = await running
    assert first == 1 and isinstance(second, ModelUnloaded)
    (w,) = await waiting
    assert isinstance(w, ModelUnloaded) and w.retryable
    with pytest.raises(ModelUnloaded):
        await q.gather([1])
    assert rule.steps == 1


def test_an_entry_is_answered_once_from_any_thread():
    async def scenario():
        loop = asyncio.get_running_loop()
        e = Entry("x", loop.create_future())
        threading.Thread(target=lambda: (e.resolve(1), e.resolve(2), e.fail(RuntimeError()))).start()
        return await e.fut, e.gone

    assert asyncio.run(scenario()) == (1, True)
