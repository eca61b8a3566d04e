"""The continuous-batching engine on the real tiny F32 GGUF (batch-invariant on CPU, so any
difference between a sequence decoded alone and in a batch is a scheduling bug)."""

import asyncio
import threading
from pathlib import Path

import pytest

from inferd.registry.discovery import make_spec
from inferd.models import ModelKind
from inferd.runtimes.options import RuntimeOptions
from inferd.scheduling.generation import Job
from inferd.service.handles import GeneratorHandle
from inferd.service.loading import LOADERS
from inferd.types import SamplingParams

GGUF = Path(__file__).parent / "fixtures" / "gguf"


class Run:
    """One submitted job and what came back for it."""

    def __init__(self, g: GeneratorHandle, prompt: list[int], max_tokens: int, **sp):
        self.deltas, self.done, self.first = [], threading.Event(), threading.Event()
        sp.setdefault("temperature", 0.0)
        self.job = Job(prompt=prompt, sampler=g.runtime.make_sampler(SamplingParams(**sp)), max_tokens=max_tokens,
                       sink=self._sink)

    def _sink(self, d):
        self.deltas.append(d)
        self.first.set()
        if d.finish_reason or d.error:
            self.done.set()

    def wait(self, timeout=30):
        assert self.done.wait(timeout), "generation did not finish"
        return self

    @property
    def tokens(self):
        return [t for d in self.deltas for t in d.tokens]

    @property
    def last(self):
        return self.deltas[-1]


def go(g, prompt, max_tokens=32, **sp) -> Run:
    r = Run(g, prompt, max_tokens, **sp)
    g.scheduler.submit(r.job)
    return r


def load_tiny() -> GeneratorHandle:
    """The handle the composition root builds: llama.cpp backend + continuous-batching engine,
    on the tiny fixture with 4 slots (also the speculation tests' generator)."""
    spec = make_spec("tiny", GGUF / "tiny-llama.gguf", "cli", ModelKind.GENERATOR)
    g = LOADERS[(ModelKind.GENERATOR, "gguf")](spec, RuntimeOptions(threads=1, parallel=4))
    assert isinstance(g, GeneratorHandle)
    return g


@pytest.fixture(scope="module")
def gen():
    g = load_tiny()
    yield g
    g.close()


def fresh(g):
    """Drop every cached prefix, so the next run computes everything itself."""
    g.scheduler.call_when_idle(lambda: None).result(10)


def prompts(g, n):
    words = ["hello", "world", "the", "other", "one", "is", "here", "there"]
    return [g.runtime.tokenize(" ".join(words[(i + j) % 8] for j in range(3 + 4 * i))) for i in range(n)]


def test_ten_jobs_on_four_slots_equal_each_alone_token_for_token(gen):
    ps = prompts(gen, 10)
    alone = []
    for p in ps:
        fresh(gen)
        alone.append(go(gen, p, 40, ignore_eos=True).wait().tokens)
    fresh(gen)
    before = sum(n * c for n, c in gen.scheduler.batch_sizes.items() if n >= 3)
    runs = [go(gen, p, 40, ignore_eos=True) for p in ps]
    got = [r.wait().tokens for r in runs]
    for i, (a, b) in enumerate(zip(alone, got)):
        assert a == b, f"sequence {i} differs when batched"
        assert len(b) == 40 and runs[i].last.finish_reason == "length"
    assert sum(n * c for n, c in gen.scheduler.batch_sizes.items() if n >= 3) > before  # they did share steps
    assert gen.scheduler.active == 0 and gen.scheduler.queued == 0


def test_prefix_of_a_finished_sequence_is_reused_not_recomputed(gen):
    fresh(gen)
    turn1 = gen.runtime.tokenize("the other one is here and there")
    first = go(gen, turn1, 8).wait()
    turn2 = turn1 + first.tokens + gen.runtime.tokenize(" hello world", add_special=False)
    second = go(gen, turn2, 12).wait()
    # in the cache: turn 1 and the generated tokens but the last one (sampled, never decoded)
    assert second.last.usage.cached_prompt_tokens == len(turn1) + len(first.tokens) - 1
    fresh(gen)
    again = go(gen, turn2, 12).wait()
    assert again.last.usage.cached_prompt_tokens == 0
    assert again.tokens == second.tokens  # reusing the cache changes nothing


def slowed(gen, seconds):
    """Slow each decode step down: the tiny model is too fast to catch a sequence mid-way."""
    real = gen.runtime.decode

    def decode(entries):
        threading.Event().wait(seconds)
        return real(entries)

    gen.runtime.decode = decode


def test_prefix_is_borrowed_from_a_live_sequence(gen):
    fresh(gen)
    base = gen.runtime.tokenize("hello world the other one is here " * 3)
    slowed(gen, 0.003)
    try:
        long = go(gen, base, 150, ignore_eos=True)
        assert long.first.wait(10)
        extra = base + gen.runtime.tokenize(" there", add_special=False)
        borrowed = go(gen, extra, 10).wait()
        assert not long.done.is_set()  # the donor was still generating
    finally:
        del gen.runtime.decode
    assert borrowed.last.usage.cached_prompt_tokens == len(base)
    long.wait()
    fresh(gen)
    alone = go(gen, extra, 10).wait()
    assert alone.tokens == borrowed.tokens


def test_cancel_stops_generation_and_frees_the_slot(gen):
    fresh(gen)
    slowed(gen, 0.01)
    try:
        r = go(gen, gen.runtime.tokenize("hello"), 200, ignore_eos=True)
        assert r.first.wait(10)
        gen.scheduler.cancel(r.job)
        r.wait(5)
    finally:
        del gen.runtime.decode
    assert r.last.finish_reason == "cancelled" and len(r.tokens) < 50
    assert gen.scheduler.active == 0
    assert go(gen, gen.runtime.tokenize("hello"), 4).wait().last.finish_reason == "length"


def test_a_failed_decode_fails_every_held_request_and_the_engine_recovers(gen):
    fresh(gen)
    real = gen.runtime.decode
    calls = {"n": 0}

    def flaky(entries):  # fail once, on the first step that holds all three sequences
        if len(entries) == 3 and not calls["n"]:
            calls["n"] += 1
            raise RuntimeError("simulated device failure")
        return real(entries)

    gen.runtime.decode = flaky
    try:
        gate = threading.Event()
        gen.scheduler.call_when_idle(lambda: gate.wait(5))  # hold the worker: the three start together
        runs = [go(gen, p, 30, ignore_eos=True) for p in prompts(gen, 3)]
        gate.set()
        for r in runs:
            r.wait()
    finally:
        del gen.runtime.decode
    for r in runs:
        assert r.last.error is not None and "simulated device failure" in str(r.last.error)
    ok = go(gen, prompts(gen, 1)[0], 5).wait()
    assert ok.last.finish_reason == "length" and len(ok.tokens) == 5


def test_context_end_stops_with_length(gen):
    fresh(gen)
    p = gen.runtime.tokenize("hello world the other one " * 60)[: gen.runtime.n_ctx_seq - 10]
    assert len(p) == gen.runtime.n_ctx_seq - 10
    r = go(gen, p, 500, ignore_eos=True).wait()
    # 10 positions left: 10 generated tokens fill them, one more is sampled from the last
    assert r.last.finish_reason == "length" and len(r.tokens) == 11


def test_lora_switch_waits_for_active_and_restores_base_token_for_token(gen):
    fresh(gen)
    p = prompts(gen, 1)[0]
    base = go(gen, p, 24, ignore_eos=True).wait().tokens
    running = go(gen, p, 60, ignore_eos=True)

    async def switch(name, path):  # the default adapter set: (path, scale) pairs, () the base weights
        await gen.set_lora(name, ((str(path), 1.0),) if path else ())

    asyncio.run(switch("tiny-lora", GGUF / "tiny-lora.gguf"))
    assert running.done.is_set() and running.tokens[:24] == base  # finished on base weights first
    assert gen.lora == "tiny-lora"
    adapted = go(gen, p, 24, ignore_eos=True).wait().tokens
    assert adapted != base
    asyncio.run(switch(None, None))
    assert gen.lora is None
    assert go(gen, p, 24, ignore_eos=True).wait().tokens == base
