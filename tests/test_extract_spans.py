"""GLiNER's greedy span search (runtimes/common/spans.py): the same choice as the plain
scan over every kept span, in time linear in the candidates (a long text has 10^5 of them)."""

from __future__ import annotations

import random
import time

from inferd.runtimes.common.spans import _overlaps, greedy_spans


def plain(spans, flat, multi_label):
    kept = []
    for s in sorted(spans, key=lambda x: -x[3]):
        if not any(_overlaps((s[0], s[1]), (k[0], k[1]), flat, multi_label) for k in kept):
            kept.append(s)
    kept.sort(key=lambda x: x[0])
    return kept


def test_same_choice_as_the_plain_scan():
    rng = random.Random(7)
    for _ in range(200):
        width = rng.randint(0, 6)
        spans = []
        for _ in range(rng.randint(0, 150)):
            a = rng.randint(0, 50)
            spans.append((a, a + rng.randint(0, width), rng.randint(0, 3), rng.choice([0.5, 0.75, rng.random()])))
        for flat in (True, False):
            for multi in (True, False):
                assert greedy_spans(spans, flat, multi) == plain(spans, flat, multi)


def test_many_candidates_are_fast():
    rng = random.Random(1)
    spans = [(a, a + k, c, rng.random()) for a in range(25_000) for k in range(4) for c in range(2)]
    t0 = time.perf_counter()
    flat = greedy_spans(spans, True, False)
    nested = greedy_spans(spans, False, True)
    dt = time.perf_counter() - t0
    assert all(a[1] < b[0] for a, b in zip(flat, flat[1:]))
    assert len(flat) >= 25_000 // 4 and len(nested) > len(flat)
    assert dt < 30, f"{dt:.1f}s for 200,000 candidates"  # the plain scan takes many minutes
