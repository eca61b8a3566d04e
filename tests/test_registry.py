"""Registry mechanics: load once, retry after failure, keep-alive, LRU. The loader here is a
plain function that records calls: what is under test is the registry's bookkeeping."""

import asyncio
import threading
import time

import pytest

from inferd.errors import ModelLoadFailed, ModelNotFound, ModelNotSupported, NotImplementedYet
from inferd.registry.registry import Registry
from inferd.models import ModelKind, ModelSpec


class Model:
    def __init__(self, name):
        self.name, self.closed = name, False

    def close(self):
        self.closed = True


class Loads:
    def __init__(self, fail_first=0, delay=0.0):
        self.calls, self.fail_first, self.delay, self.lock = [], fail_first, delay, threading.Lock()
        self.made: list[Model] = []

    def __call__(self, spec):
        with self.lock:
            self.calls.append(spec.name)
            n = len(self.calls)
        time.sleep(self.delay)
        if n <= self.fail_first:
            raise RuntimeError("disk on fire")
        self.made.append(Model(spec.name))
        return self.made[-1]


def specs(*names, kind=ModelKind.EMBEDDER):
    return [ModelSpec(name=n, kind=kind, format="onnx", path=None, source="test") for n in names]


class Clock:
    t = 1000.0

    def __call__(self):
        return self.t


def make(loads, names=("a", "b", "c"), **kw):
    return Registry.build(specs(*names), lambda spec: loads, **kw)


async def test_concurrent_first_requests_load_once():
    loads = Loads(delay=0.2)
    reg = make(loads)

    async def use():
        async with reg.use("a") as m:
            return m

    models = await asyncio.gather(*[use() for _ in range(10)])
    assert loads.calls == ["a"]
    assert len({id(m) for m in models}) == 1


async def test_failed_load_is_reported_and_retried():
    loads = Loads(fail_first=1)
    reg = make(loads)
    with pytest.raises(ModelLoadFailed, match="disk on fire"):
        async with reg.use("a"):
            pass
    assert "a" not in reg.loaded
    async with reg.use("a") as m:
        assert m.name == "a"
    assert loads.calls == ["a", "a"]


async def test_unknown_and_wrong_kind():
    reg = make(Loads())
    with pytest.raises(ModelNotFound):
        reg.resolve("zzz")
    with pytest.raises(ModelNotSupported, match="is a embedder"):
        reg.resolve("a", [ModelKind.GENERATOR])


async def test_keep_alive_expiry_never_while_in_use():
    clock = Clock()
    loads = Loads()
    reg = make(loads, keep_alive=60, clock=clock)
    async with reg.use("a") as m:
        clock.t += 120
        await reg.reap()
        assert "a" in reg.loaded and not m.closed  # in use: never unloaded
    clock.t += 30
    await reg.reap()
    assert "a" in reg.loaded
    clock.t += 31
    await reg.reap()
    assert "a" not in reg.loaded and m.closed


async def test_lru_eviction_beyond_max_loaded():
    clock = Clock()
    reg = make(Loads(), max_loaded=2, clock=clock)
    for name in ("a", "b"):
        async with reg.use(name):
            clock.t += 1
    async with reg.use("a"):  # a is now more recent than b
        clock.t += 1
    async with reg.use("c"):
        pass
    assert set(reg.loaded) == {"a", "c"}


async def test_keep_alive_zero_unloads_after_use():
    reg = make(Loads())
    async with reg.use("a", keep_alive=0):
        assert "a" in reg.loaded
    assert "a" not in reg.loaded


async def test_no_runtime_for_format_is_clear():
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.loading import Loaders

    reg = Registry.build([ModelSpec("x", ModelKind.READER, "weird", None, "test")], Loaders(RuntimeOptions()))
    with pytest.raises(NotImplementedYet, match="reader models in weird format"):
        async with reg.use("x"):
            pass


# ---- preload (inferd serve --preload) ----------------------------------------------------------
class ThreadLoads(Loads):
    def __call__(self, spec):
        self.thread = threading.current_thread().name
        return super().__call__(spec)


def test_preload_loads_on_its_own_thread_before_any_event_loop_and_the_first_use_adopts_it():
    loads = ThreadLoads(delay=0.3)
    reg = make(loads)
    t0 = time.monotonic()
    assert reg.preload(["b", "a"]) == ["b", "a"]
    assert time.monotonic() - t0 < 0.2  # it does not wait for the loads
    assert reg.loaded == {}  # registered only once a loop adopts them

    async def serve():
        reg.start()
        async with reg.use("a") as m:
            got = m
        await asyncio.sleep(0.4)  # "b" came first; both are registered
        await reg.close()
        return got

    got = asyncio.run(serve())
    assert got.name == "a" and loads.calls == ["b", "a"]  # one load each, in the order asked
    assert loads.thread == "preload" and reg.loads == 2


def test_a_failed_preload_is_reported_once_and_retried_on_first_use():
    loads = Loads(fail_first=1)
    reg = make(loads)
    reg.preload(["a"])
    time.sleep(0.1)

    async def serve():
        with pytest.raises(ModelLoadFailed, match="disk on fire"):
            async with reg.use("a"):
                pass
        async with reg.use("a") as m:  # a new load, not the failed preload again
            return m

    assert asyncio.run(serve()).name == "a" and loads.calls == ["a", "a"]


def test_preload_of_an_unknown_name_is_a_config_error():
    from inferd.errors import ConfigError

    with pytest.raises(ConfigError, match="--preload"):
        make(Loads()).preload(["nope"])


def test_preload_waits_between_models():
    loads, waits = ThreadLoads(), []
    reg = make(loads)
    reg.preload(["a", "b", "c"], between=lambda: waits.append(list(loads.calls)))
    deadline = time.time() + 5
    while len(loads.calls) < 3 and time.time() < deadline:
        time.sleep(0.01)
    assert waits == [["a"], ["a", "b"]]  # before each load but the first


def test_a_preload_that_cannot_fit_the_memory_budget_is_refused_and_closed():
    from inferd.errors import MemoryBudgetExceeded

    loads = Loads()
    big = ModelSpec(name="big", kind=ModelKind.EMBEDDER, format="onnx", path=None, source="test", size_bytes=10_000)
    reg = Registry.build([big], lambda spec: loads, max_memory=1_000)
    reg.preload(["big"])

    async def serve():
        with pytest.raises(MemoryBudgetExceeded):
            async with reg.use("big"):
                pass

    asyncio.run(serve())
    deadline = time.time() + 5
    while not (loads.made and loads.made[-1].closed) and time.time() < deadline:
        time.sleep(0.01)
    assert loads.made[-1].closed and reg.loaded == {}  # built on its thread, then closed, never registered
