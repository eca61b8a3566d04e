"""Model loads owned by the registry (issue 10): a client that leaves mid-load costs the other
waiters nothing and leaks nothing; loads are counted by loader calls; the memory budget evicts
idle models and answers 507; a cancelled LoRA switch never leaves name and weights apart;
batch generation holds as much admission as it puts on the engine."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from inferd.errors import MemoryBudgetExceeded
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from tests.server import serve

TINY = "tests/fixtures/gguf/tiny-llama.gguf"
LORA_DIR_FILES = ("tests/fixtures/gguf/tiny-llama.gguf", "tests/fixtures/gguf/tiny-lora.gguf")
HI = [{"role": "user", "content": "hi"}]


def slow_loads(s, seconds: float) -> list[str]:
    """Make every load of this server take `seconds` longer; returns the names loaded, one
    entry per loader call."""
    reg = s.service.registry
    real, calls = reg.loader_for, []

    def lookup(spec):
        load = real(spec)

        def go(sp):
            calls.append(sp.name)
            time.sleep(seconds)
            return load(sp)

        return go

    reg.loader_for = lookup
    return calls


def _requests(model: str) -> list[tuple[str, dict]]:
    if model == "tiny":
        return [("/v1/chat/completions", {"model": "tiny", "messages": HI, "max_tokens": 2, "temperature": 0}),
                ("/api/chat", {"model": "tiny", "messages": HI, "stream": False, "options": {"num_predict": 2}}),
                ("/ai/v1/generate", {"model": "tiny", "messages": HI, "max_tokens": 2})]
    return [("/v1/embeddings", {"model": model, "input": "hello"}),
            ("/api/embed", {"model": model, "input": "hello"}),
            ("/ai/v1/embed", {"model": model, "input": ["hello"]})]


@pytest.mark.parametrize("model", ["tiny", "all-MiniLM-L6-v2"])
def test_a_client_leaving_mid_load_does_not_affect_the_other_waiters(model):
    with serve(models=[f"tiny={TINY}"], builtins=True, threads=1) as s:
        assert model in s.service.registry.specs  # the built-in MiniLM is installed by both README commands
        calls = slow_loads(s, 1.5)
        reqs = _requests(model)

        async def scenario():
            async with httpx.AsyncClient(base_url=s.url, timeout=60) as c:
                async def leaver():
                    path, body = reqs[0]
                    with pytest.raises(httpx.ReadTimeout):
                        await c.post(path, json=body, timeout=0.4)  # gone while the model loads

                others = [c.post(p, json=b) for p, b in reqs]
                return await asyncio.gather(leaver(), *others)

        _, *rs = asyncio.run(scenario())
        for r in rs:
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("application/json")
        assert calls == [model]  # one loader call for all four requesters
        assert model in s.service.registry.loaded  # registered, so it is unloaded (closed) later
        assert s.service.registry.loads == 1
        assert s.service.admission.in_flight == 0
    # The server closed every loaded model on shutdown (the generator's worker thread too).
    assert not s.service.registry.loaded


def test_every_waiter_gets_the_same_enveloped_error_when_a_load_fails(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF nonsense" * 100)
    with serve(models=[f"broken={bad}"], threads=1) as s:
        calls = slow_loads(s, 0.5)

        async def scenario():
            async with httpx.AsyncClient(base_url=s.url, timeout=60) as c:
                return await asyncio.gather(*[c.post("/v1/chat/completions", json={
                    "model": "broken", "messages": HI, "max_tokens": 1}) for _ in range(4)])

        rs = asyncio.run(scenario())
        assert [r.status_code for r in rs] == [500] * 4
        assert {r.json()["error"]["code"] for r in rs} == {"model_load_failed"}
        assert calls == ["broken"]


async def test_loads_of_different_models_run_one_at_a_time():
    active, peak = [0], [0]
    lock = threading.Lock()

    class Model:
        size_bytes = 10

        def close(self):
            pass

    def loader(spec):
        def load(sp):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.1)
            with lock:
                active[0] -= 1
            return Model()
        return load

    specs = [ModelSpec(n, ModelKind.EMBEDDER, "onnx", None, "test") for n in "abc"]
    reg = Registry.build(specs, loader)

    async def use(name):
        async with reg.use(name):
            pass

    await asyncio.gather(*(use(n) for n in "abc"))
    assert peak[0] == 1 and reg.loads == 3


# ---- memory budget ----------------------------------------------------------------------------
class Sized:
    def __init__(self, size):
        self.size_bytes, self.closed = size, False

    def close(self):
        self.closed = True


async def test_memory_budget_evicts_idle_models_lru_and_refuses_what_cannot_fit():
    made: dict[str, Sized] = {}

    def loader(spec):
        def load(sp):
            made[sp.name] = Sized(sp.size_bytes)
            return made[sp.name]
        return load

    specs = [ModelSpec(n, ModelKind.EMBEDDER, "onnx", None, "test", size_bytes=sz)
             for n, sz in (("a", 400), ("b", 400), ("c", 400), ("huge", 2000))]
    reg = Registry.build(specs, loader, max_memory=1000)
    async with reg.use("a"):
        pass
    async with reg.use("b"):
        pass
    async with reg.use("a"):  # a is now more recently used than b
        pass
    async with reg.use("c"):  # 1200 > 1000: the least recently used idle model (b) goes
        assert sorted(reg.loaded) == ["a", "c"] and made["b"].closed and not made["a"].closed
    with pytest.raises(MemoryBudgetExceeded, match="huge"):
        async with reg.use("huge"):
            pass
    async with reg.use("a"), reg.use("c"):  # both busy: b cannot be made room for
        with pytest.raises(MemoryBudgetExceeded, match="in use"):
            async with reg.use("b"):
                pass
    assert reg.resident_bytes() == 800


def test_memory_budget_over_http_is_507_in_every_family_and_ps_shows_sizes():
    with serve(models=[f"tiny={TINY}", f"tiny2={TINY}"], threads=1, parallel=1) as s:
        r = httpx.post(s.url + "/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False,
                                                       "options": {"num_predict": 1}})
        assert r.status_code == 200
        size = s.service.registry.loaded["tiny"].size_bytes
        assert size > 445_408  # weights plus the KV cache estimate
        ps = httpx.get(s.url + "/api/ps").json()["models"]
        assert ps[0]["name"] == "tiny:latest" and ps[0]["size"] == size
        entry = httpx.get(s.url + "/ai/v1/models").json()["generators"]["tiny"]
        assert entry["loaded"] is True and entry["size_bytes"] == size
        # A budget for one model: loading the second evicts the idle first.
        s.service.registry.max_memory = int(size * 1.5)
        r = httpx.post(s.url + "/v1/completions", json={"model": "tiny2", "prompt": "hi", "max_tokens": 1})
        assert r.status_code == 200 and sorted(s.service.registry.loaded) == ["tiny2"]
        # A budget no model fits: 507 with each family's envelope.
        s.service.registry.max_memory = 1000
        r = httpx.post(s.url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 1})
        assert r.status_code == 507 and r.json()["error"]["code"] == "memory_budget_exceeded"
        r = httpx.post(s.url + "/ai/v1/generate", json={"model": "tiny", "messages": HI, "max_tokens": 1})
        assert r.status_code == 507 and r.json()["error"] == "MEMORY_BUDGET_EXCEEDED"
        assert "--max-memory" in r.json()["message"]
        r = httpx.post(s.url + "/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
        assert r.status_code == 507 and "memory budget" in r.json()["error"]


def test_max_memory_flag_parses_sizes():
    from inferd.config import load_settings

    assert load_settings({"max_memory": "8GiB"}).max_memory == 8 * 2**30
    assert load_settings({"max_memory": "512MB"}).max_memory == 512 * 10**6
    assert load_settings({"max_memory": "0"}).max_memory == 0
    assert load_settings({}).max_memory > 0  # a share of the machine's RAM by default
    with pytest.raises(Exception, match="not a size"):
        load_settings({"max_memory": "lots"})


# ---- LoRA switching ------------------------------------------------------------------------
def greedy(url, n=12):
    r = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "hello world", "max_tokens": n,
                                                  "temperature": 0, "ignore_eos": True}, timeout=60)
    assert r.status_code == 200
    return r.json()["choices"][0]["text"]


def test_a_cancelled_lora_switch_never_leaves_name_and_weights_apart(tmp_path):
    import shutil

    folder = tmp_path / "generators" / "tiny"
    (folder / "loras").mkdir(parents=True)
    shutil.copy(LORA_DIR_FILES[0], folder / "model.gguf")
    shutil.copy(LORA_DIR_FILES[1], folder / "loras" / "style.gguf")
    with serve(models_dir=str(tmp_path), threads=1) as s:
        base = greedy(s.url)
        httpx.post(s.url + "/set_lora", json={"model": "tiny", "name": "style"}).raise_for_status()
        adapted = greedy(s.url)
        httpx.post(s.url + "/unset_lora", json={"model": "tiny"}).raise_for_status()
        assert adapted != base and greedy(s.url) == base
        handle = s.service.registry.loaded["tiny"].model
        gate = threading.Event()
        handle.scheduler.call_when_idle(lambda: gate.wait(10))  # the switch must wait behind this

        async def cancelled_switch():
            task = asyncio.ensure_future(s.service.set_lora("tiny", "style"))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        s.call(cancelled_switch())
        gate.set()
        # The switch the worker applied is the one reported: weights and name agree.
        info = httpx.get(s.url + "/v1/models/tiny").json()
        out = greedy(s.url)
        assert (info["lora"], out) in {("style", adapted), (None, base)}
        assert handle.lora == info["lora"]


# ---- batch admission -------------------------------------------------------------------------
def test_a_batch_holds_admission_for_every_item_it_puts_on_the_engine():
    with serve(models=[f"tiny={TINY}"], threads=1, max_concurrent_requests=4, max_queued_requests=0) as s:
        greedy(s.url, 1)  # loaded
        handle = s.service.registry.loaded["tiny"].model
        gate = threading.Event()
        handle.scheduler.call_when_idle(lambda: gate.wait(10))  # hold the engine while we look
        items = [{"custom_id": f"r{i}", "body": {"model": "tiny", "messages": HI, "max_tokens": 2}}
                 for i in range(6)]
        done: dict = {}
        t = threading.Thread(target=lambda: done.setdefault("r", httpx.post(
            s.url + "/ai/v1/generate/batch", json={"mode": "sync", "requests": items}, timeout=60)))
        t.start()
        deadline = time.time() + 10
        while s.service.admission.in_flight < 4 and time.time() < deadline:
            time.sleep(0.01)
        assert s.service.admission.in_flight == 4  # six items: the whole capacity, not one slot
        r = httpx.post(s.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1})
        assert r.status_code == 503 and r.json()["error"]["retry_after_ms"] > 0
        gate.set()
        t.join(60)
        assert done["r"].status_code == 200 and done["r"].json()["summary"]["succeeded"] == 6
