"""LoopMailbox (service/mailbox.py): the engine thread's deltas reach the event loop in
posting order, a post without wake waits for the next one that wakes, posts made while a
drain is pending share it, and a closed loop is an error (the engine then cancels the job)."""

import asyncio
import threading

import pytest

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
