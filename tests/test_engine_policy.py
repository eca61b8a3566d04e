"""The continuous-batching engine's scheduling policy, on a fake Backend (no llama.cpp):
admission order, prefix sharing, chunked prefill, cancellation, idle calls, the bounded
waiting queue and the errors of unload and failure. Milliseconds per test; the real-llama.cpp
behaviour is covered by test_gen_engine.py."""

from __future__ import annotations

import threading
import time

import pytest

from inferd.errors import InferenceFailed, ModelUnloaded, Overloaded
from inferd.scheduling.generation import GenerationEngine, Job
from inferd.scheduling.wakeups import defer
from inferd.types import TokenLogprob

EOG = 0


class FakeSampler:
    closed = False

    def close(self):
        self.closed = True


class FakeBackend:
    """Greedy "model": the next token after t is t + 1 (wrapping below EOG). Records every
    decode call, so tests can see what each step carried."""

    def __init__(self, n_seq=2, n_ctx_seq=4096, n_batch=16, vocab=50, delay=0.002):
        self.n_seq, self.n_ctx_seq, self.n_batch, self.vocab = n_seq, n_ctx_seq, n_batch, vocab
        self.steps: list[list[tuple[int, list[int], int, bool]]] = []
        self.copies: list[tuple[int, int, int, int]] = []
        self.last: dict[int, int] = {}   # seq -> last token decoded
        self.gate = threading.Event()
        self.gate.set()
        self.fail_next = False
        self.delay = delay  # seconds per step: a running stream lasts long enough to be watched

    def decode(self, entries):
        self.gate.wait(10)
        time.sleep(self.delay)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("simulated decode failure")
        self.steps.append([(s, list(t), p, w) for s, t, p, w in entries])
        rows = []
        for i, (seq, toks, _p0, want) in enumerate(entries):
            self.last[seq] = toks[-1]
            rows.append(i if want else -1)
        self._rows = {i: entries[i][0] for i in range(len(entries))}
        return rows

    def sample(self, sampler, row):
        t = self.last[self._rows[row]] + 1
        return t if t < self.vocab else 1

    def logprob(self, row, token, top_n):
        return TokenLogprob(token, str(token), b"", 0.0)

    def piece(self, token):
        return f"<{token}>".encode()

    def is_eog(self, token):
        return token == EOG

    def seq_rm(self, seq, p0, p1):
        return True

    def seq_cp(self, src, dst, p0, p1):
        self.copies.append((src, dst, p0, p1))

    def clear(self):
        pass


class Run:
    def __init__(self, prompt, max_tokens=4, **kw):
        self.deltas, self.done = [], threading.Event()
        self.sampler = FakeSampler()
        self.job = Job(prompt=list(prompt), sampler=self.sampler, max_tokens=max_tokens, sink=self._sink, **kw)

    def _sink(self, d):
        self.deltas.append(d)
        if d.finish_reason or d.error:
            self.done.set()

    def wait(self):
        assert self.done.wait(10), "job did not finish"
        return self

    @property
    def tokens(self):
        return [t for d in self.deltas for t in d.tokens]

    @property
    def last(self):
        return self.deltas[-1]


@pytest.fixture
def engine():
    be = FakeBackend()
    eng = GenerationEngine(be, name="fake", max_waiting=3)
    yield eng, be
    be.gate.set()
    eng.close()


def submit(eng, prompt, **kw):
    r = Run(prompt, **kw)
    eng.submit(r.job)
    return r


def test_greedy_tokens_and_finish_reason(engine):
    eng, _ = engine
    r = submit(eng, [5, 6, 7], max_tokens=3).wait()
    assert r.tokens == [8, 9, 10] and r.last.finish_reason == "length"
    assert r.last.usage.prompt_tokens == 3 and r.last.usage.completion_tokens == 3
    assert r.sampler.closed


def test_jobs_beyond_the_slots_wait_in_arrival_order(engine):
    eng, be = engine
    be.gate.clear()
    runs = [submit(eng, [10 + i, 20], max_tokens=2) for i in range(3)]
    be.gate.set()
    for r in runs:
        r.wait()
    admitted = [r.job.t_admitted for r in runs]
    assert admitted == sorted(admitted)  # FIFO
    assert max(len(step) for step in be.steps) == 2  # two slots: never more than two sequences a step


def test_a_finished_prefix_is_reused_and_only_the_rest_prefilled(engine):
    eng, be = engine
    submit(eng, [1, 2, 3, 4, 5, 6], max_tokens=1).wait()
    n = len(be.steps)
    r = submit(eng, [1, 2, 3, 4, 5, 6, 40, 41], max_tokens=1).wait()
    assert r.last.usage.cached_prompt_tokens == 6
    prefilled = [t for step in be.steps[n:] for _s, toks, _p, _w in step for t in toks]
    assert prefilled[:2] == [40, 41]  # the cached six are not decoded again


def test_a_prefix_is_borrowed_from_another_slot_by_copying_cells(engine):
    eng, be = engine
    submit(eng, [1, 2, 3, 4, 5, 6, 7, 8], max_tokens=1).wait()
    be.gate.clear()
    hold = submit(eng, [30, 31], max_tokens=50)  # occupies one slot...
    be.gate.set()
    while not hold.deltas:
        pass
    r = submit(eng, [1, 2, 3, 4, 5, 6, 7, 8, 9], max_tokens=1).wait()
    assert r.last.usage.cached_prompt_tokens == 8
    eng.cancel(hold.job)
    hold.wait()


def test_long_prompts_prefill_in_chunks_while_running_streams_keep_decoding(engine):
    eng, be = engine  # n_batch 16
    running = submit(eng, [3], max_tokens=100_000)
    while len(running.tokens) < 2:
        pass
    n = len(be.steps)
    long_ = submit(eng, list(range(1, 41)), max_tokens=1).wait()
    chunked = [step for step in be.steps[n:] if any(len(t) > 1 for _s, t, _p, _w in step)]
    assert len(chunked) >= 3  # 40 prompt tokens through a 16-token step
    for step in chunked:
        assert sum(len(t) for _s, t, _p, _w in step) <= be.n_batch
        assert any(len(t) == 1 for _s, t, _p, _w in step)  # the running stream advanced in the same step
    assert long_.last.finish_reason == "length"
    eng.cancel(running.job)
    assert running.wait().last.finish_reason == "cancelled"


def test_cancel_frees_the_slot_at_the_next_step(engine):
    eng, _ = engine
    r = submit(eng, [3], max_tokens=1000)
    while len(r.tokens) < 3:
        pass
    eng.cancel(r.job)
    assert r.wait().last.finish_reason == "cancelled"
    assert eng.active == 0 and r.sampler.closed


def test_idle_call_runs_after_earlier_jobs_and_before_later_ones(engine):
    eng, _ = engine
    order = []
    a = submit(eng, [3], max_tokens=5)
    fut = eng.call_when_idle(lambda: order.append(("idle", len(a.tokens))))
    b = submit(eng, [4], max_tokens=1)
    fut.result(10)
    b.wait()
    assert order == [("idle", 5)]  # a had finished all five tokens
    assert b.job.t_admitted >= a.job.t_last


def test_a_full_waiting_queue_is_overloaded_not_unbounded(engine):
    eng, be = engine  # 2 slots, 3 may wait
    be.gate.clear()
    runs = []
    with pytest.raises(Overloaded) as e:
        for i in range(10):
            runs.append(submit(eng, [i + 2], max_tokens=1))
    assert e.value.retry_after_ms > 0 and e.value.retryable
    assert eng.max_waiting <= len(runs) <= eng.max_waiting + be.n_seq  # refused once 3 were waiting
    be.gate.set()
    for r in runs:
        r.wait()


def test_close_fails_held_jobs_with_one_retryable_error_each():
    be = FakeBackend()
    eng = GenerationEngine(be, name="fake")
    be.gate.clear()
    runs = [submit(eng, [i + 2], max_tokens=100) for i in range(4)]
    threading.Timer(0.2, be.gate.set).start()
    assert eng.close() is True  # the worker stopped: native state may be freed now
    errors = [r.wait().last.error for r in runs]
    assert all(isinstance(e, ModelUnloaded) and e.retryable for e in errors)
    assert len({id(e) for e in errors}) == 4  # one instance per job
    with pytest.raises(ModelUnloaded):
        eng.submit(Run([1]).job)


def test_a_failed_decode_fails_each_held_job_with_its_own_error(engine):
    eng, be = engine
    be.gate.clear()
    runs = [submit(eng, [i + 2], max_tokens=5) for i in range(2)]
    be.fail_next = True
    be.gate.set()
    errors = [r.wait().last.error for r in runs]
    assert all(isinstance(e, InferenceFailed) and "simulated decode failure" in e.message for e in errors)
    assert errors[0] is not errors[1]
    assert submit(eng, [3], max_tokens=2).wait().tokens == [4, 5]  # the engine recovered


def test_a_burst_of_prompts_fills_every_step_to_n_batch_as_llama_server_does():
    """llama-server's update_slots: every arrival queued before a step takes a slot at once,
    and each step carries all running next tokens plus prompt tokens of as many slots as fit
    in n_batch (a prompt split across steps where the batch is full). Sixteen 128-token
    prompts on 16 slots with n_batch 512: 2048 prompt tokens in four full steps and a fifth
    with the rest, every first token by step 5 (one prompt per step would take 16 steps)."""
    be = FakeBackend(n_seq=16, n_batch=512, vocab=100_000, delay=0)
    eng = GenerationEngine(be, name="fake")
    release = threading.Event()
    try:
        # the worker is held inside an idle call while all sixteen arrive: one burst
        fut = eng.call_when_idle(lambda: release.wait(10))
        runs = [submit(eng, [1000 * (i + 1) + k for k in range(128)], max_tokens=8) for i in range(16)]
        release.set()
        fut.result(10)
        for r in runs:
            r.wait()
        steps = be.steps  # a prompt chunk sits below position 128, a next token at 128 and up
        prompt_toks = [sum(len(t) for _s, t, p, _w in st if p < 128) for st in steps[:5]]
        decodes = [sum(1 for _s, _t, p, _w in st if p >= 128) for st in steps[:5]]
        assert prompt_toks == [512, 508, 505, 501, 22]
        assert decodes == [0, 4, 7, 11, 15]
        # the step (1-based) of each job's first next-token decode: one step after its prompt ended
        first = sorted(next(k for k, st in enumerate(steps, 1) if (r.job.slot, 128) in {(s, p) for s, _t, p, _w in st})
                       for r in runs)
        assert first == [2] * 4 + [3] * 3 + [4] * 4 + [5] * 4 + [6]
        assert all(len(r.tokens) == 8 for r in runs)
    finally:
        release.set()
        eng.close()


def test_the_deltas_of_a_step_are_posted_inside_one_wakeup_block():
    """Every token delta the worker emits after a decode is posted inside `step_wakeups`, so
    a listener's loop wakes once per step, after the step's last delta (wakeups.py)."""
    be = FakeBackend(n_seq=4, n_batch=64, delay=0)
    eng = GenerationEngine(be, name="fake")
    events: list[tuple[str, int]] = []  # ("post", job) and ("wake", steps so far)

    def sink_for(k: int, run: Run):
        real = run._sink

        def sink(d):
            events.append(("post", k))
            deferred = defer("listener", lambda: events.append(("wake", len(be.steps))))
            assert deferred, "a delta posted outside a step block"
            real(d)
        return sink

    release = threading.Event()
    try:
        fut = eng.call_when_idle(lambda: release.wait(10))
        runs = []
        for k in range(4):
            r = Run([10 * (k + 1), 11 * (k + 1)], max_tokens=5)
            r.job.sink = sink_for(k, r)
            runs.append(r)
            eng.submit(r.job)
        release.set()
        fut.result(10)
        for r in runs:
            r.wait()
        assert all(len(r.tokens) == 5 for r in runs)
        wakes = [e for e in events if e[0] == "wake"]
        assert [w[1] for w in wakes] == list(range(1, len(be.steps) + 1))  # one per step, in order
        # within a step: the four posts, then its one wake
        for i in range(5):
            step = events[i * 5:(i + 1) * 5]
            assert sorted(k for kind, k in step if kind == "post") == [0, 1, 2, 3] and step[-1] == ("wake", i + 1)
    finally:
        release.set()
        eng.close()
