import asyncio

import pytest

from inferd.errors import Overloaded
from inferd.scheduling.admission import Admission


async def test_limits_queue_and_fifo():
    adm = Admission(max_in_flight=2, max_queue=2, queue_timeout=5)
    order, gate = [], asyncio.Event()

    async def job(i):
        async with adm.slot():
            order.append(i)
            await gate.wait()

    tasks = [asyncio.create_task(job(i)) for i in range(4)]
    await asyncio.sleep(0.05)
    assert (adm.in_flight, adm.queued) == (2, 2)
    with pytest.raises(Overloaded) as e:
        async with adm.slot():
            pass
    assert 100 <= e.value.retry_after_ms <= 30_000 and adm.rejected == 1
    gate.set()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3] and adm.in_flight == 0 and adm.queued == 0


async def test_queue_timeout_refuses_and_frees_nothing():
    adm = Admission(max_in_flight=1, max_queue=4, queue_timeout=0.1)
    gate = asyncio.Event()

    async def hold():
        async with adm.slot():
            await gate.wait()

    t = asyncio.create_task(hold())
    await asyncio.sleep(0.01)
    with pytest.raises(Overloaded, match="waited"):
        async with adm.slot():
            pass
    assert adm.queued == 0 and adm.in_flight == 1
    gate.set()
    await t
    assert adm.in_flight == 0


async def test_cancelled_waiter_leaves_the_queue():
    adm = Admission(max_in_flight=1, max_queue=4, queue_timeout=5)
    gate = asyncio.Event()

    async def hold():
        async with adm.slot():
            await gate.wait()

    async def wait():
        async with adm.slot():
            pass

    h = asyncio.create_task(hold())
    await asyncio.sleep(0.01)
    w = asyncio.create_task(wait())
    await asyncio.sleep(0.01)
    assert adm.queued == 1
    w.cancel()
    await asyncio.sleep(0.01)
    assert adm.queued == 0
    gate.set()
    await h
    assert adm.in_flight == 0
