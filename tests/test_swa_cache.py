"""gemma-3 (sliding window 512) on one slot: the context keeps llama-server's small
sliding-window cache (swa_full off), which drops cells older than the window; with several
slots it keeps every cell (siblings and borrowed prefixes share cells, which that cache could
not reclaim). The scheduler's `reusable` guard must then refuse a prefix cut back past the
window, and every reuse it allows must give the tokens of a cold run."""

from __future__ import annotations

import contextlib

import pytest

from inferd.models import ModelKind
from inferd.registry.discovery import make_spec
from inferd.runtimes.options import RuntimeOptions
from inferd.service.loading import LOADERS
from tests.test_gen_engine import Run

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def loaded(parallel: int):
    from inferd.registry.builtins import gemma_270m_path

    spec = make_spec("g", gemma_270m_path(), "cli", ModelKind.GENERATOR)
    g = LOADERS[(ModelKind.GENERATOR, "gguf")](spec, RuntimeOptions(threads=2, parallel=parallel, n_ctx=3072))
    try:
        yield g
    finally:
        g.close()


def run(g, prompt, n=8):
    r = Run(g, prompt, n, ignore_eos=True)
    g.scheduler.submit(r.job)
    return r.wait(180)


def pos_min(g, seq: int = 0) -> int:
    return g.scheduler.call_when_idle(lambda: g.runtime.ctx.seq_pos_min(seq), reset_cache=False).result(30)


def drop_caches(g) -> None:
    g.scheduler.call_when_idle(lambda: None).result(30)


def equals_cold(g, prompt, reused, n=12) -> None:
    """The same prompt with every cache dropped: a cold prefill, and the same greedy tokens."""
    drop_caches(g)
    cold = run(g, prompt, n)
    assert cold.last.usage.cached_prompt_tokens == 0
    assert reused.tokens == cold.tokens


STORY = "A long story about a lighthouse keeper and the sea, night after night. " * 110


def test_one_slot_keeps_a_small_window_and_refuses_a_prefix_cut_past_it():
    with loaded(1) as g:
        tok = g.runtime.tokenize
        a = tok(STORY)
        assert len(a) > 1600
        run(g, a, 2)
        # the sliding-window layers hold about n_swa + n_batch cells, not the whole sequence:
        # the oldest positions are gone (with swa_full every position from 0 would be there)
        assert pos_min(g) > 0
        b = a[:400] + tok(" But the keeper was tired of the sea.", add_special=False)
        cut = run(g, b, 12)
        assert cut.last.usage.cached_prompt_tokens == 0  # refused: position 400's window is gone
        assert g.scheduler.stats.prompt_cache_refused == 1
        equals_cold(g, b, cut)


def test_one_slot_second_turn_reuses_past_the_window_and_equals_cold():
    with loaded(1) as g:
        tok = g.runtime.tokenize
        a = tok(STORY)
        first = run(g, a, 24)
        turn2 = a + first.tokens[:-3] + tok(" And then the storm came.", add_special=False)
        warm = run(g, turn2, 12)
        # the divergence is three tokens before the end: within the window, so reused
        assert warm.last.usage.cached_prompt_tokens == len(a) + len(first.tokens) - 3
        assert g.scheduler.stats.prompt_cache_refused == 0
        equals_cold(g, turn2, warm)


def test_several_slots_keep_every_cell():
    with loaded(2) as g:
        a = g.runtime.tokenize(STORY)
        run(g, a, 2)
        busy = next(s for s in g.scheduler.slots if s.cache)
        assert pos_min(g, busy.id) == 0  # swa_full: nothing dropped
        b = a[:400] + g.runtime.tokenize(" But the keeper was tired.", add_special=False)
        cut = run(g, b, 4)
        assert cut.last.usage.cached_prompt_tokens == 400
        assert busy.cache[:400] == a[:400]
        assert g.scheduler.stats.prompt_cache_refused == 0
