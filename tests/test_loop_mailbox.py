"""LoopMailbox (service/mailbox.py): the engine thread's deltas reach the event loop in
posting order, a post without wake waits for the next one that wakes, posts made while a
drain is pending share it, the posts of one engine step (`step_wakeups`) wake the loop once
after the step's last one even while the loop runs, and a closed loop is an error (the
engine then cancels the job)."""

import asyncio
import contextlib
import threading
import time

import pytest

from inferd.scheduling.wakeups import step_wakeups
from inferd.service.mailbox import LoopMailbox


async def test_order_coalescing_and_deferred_posts():
    loop = asyncio.get_running_loop()
    box = LoopMailbox.of(loop)
    assert LoopMailbox.of(loop) is box
    got: list[int] = []
    drains = 0
    real = box._drain

    def counting() -> None:
        nonlocal drains
        drains += 1
        real()
    box._drain = counting  # type: ignore[method-assign]

    def engine() -> None:  # one "step": 16 sequences' deltas, posted back to back
        for i in range(16):
            box.post(got.append, i)
    t = threading.Thread(target=engine)
    t.start()
    t.join()
    await asyncio.sleep(0.05)
    assert got == list(range(16))
    assert drains == 1  # the loop was not running while the thread posted: one wake for all

    box.post(got.append, 100, wake=False)  # a non-streamed request's intermediate delta
    await asyncio.sleep(0.05)
    assert got[-1] == 15
    box.post(got.append, 101)  # its final delta wakes the loop: both arrive, in order
    await asyncio.sleep(0.05)
    assert got[-2:] == [100, 101]


def test_a_closed_loop_refuses_posts():
    loop = asyncio.new_event_loop()
    box = LoopMailbox.of(loop)
    loop.close()
    with pytest.raises(RuntimeError):
        box.post(print, "x")


async def test_one_wake_per_step_while_the_loop_runs():
    """The loop is free to run while the "engine" samples (a pause between its posts, as
    native sampling releases the GIL): without a step block nearly every post wakes it;
    inside one, one wake per step, after the step's last post, and no delta before it."""
    loop = asyncio.get_running_loop()
    box = LoopMailbox(loop)
    got: list[tuple[int, int]] = []
    seen_at_end: list[int] = []

    def engine(steps: int, in_step: bool) -> None:
        for s in range(steps):
            with step_wakeups() if in_step else contextlib.nullcontext():
                for i in range(16):
                    box.post(got.append, (s, i))
                    time.sleep(0.002)
                seen_at_end.append(len(got))  # what the loop had received when the step ended

    t = threading.Thread(target=engine, args=(3, False))
    t.start()
    while t.is_alive():
        await asyncio.sleep(0.0005)
    await asyncio.sleep(0.05)
    loose = box.wakeups
    assert got == [(s, i) for s in range(3) for i in range(16)]
    assert loose > 3 * 4  # the running loop drained mid-step, and was woken again and again

    got.clear()
    seen_at_end.clear()
    before = box.wakeups
    t = threading.Thread(target=engine, args=(3, True))
    t.start()
    while t.is_alive():
        await asyncio.sleep(0.0005)
    await asyncio.sleep(0.05)
    assert got == [(s, i) for s in range(3) for i in range(16)]
    assert box.wakeups - before == 3  # one per step
    assert seen_at_end[0] == 0  # nothing of the first step reached the loop before its last post
