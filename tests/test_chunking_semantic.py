"""The built-in `semantic` chunker: the pure algorithm (text/semantic.py) on exact values, then
end to end through /ai/v1/chunk with the built-in all-MiniLM-L6-v2 embedder."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from inferd.errors import InvalidInput
from inferd.text.chunking import count_tokens
from inferd.text.semantic import (SemanticConfig, adjacent_similarity, breakpoints, chunks_of, gap_windows,
                                  group_spans, pack, plan, sentence_spans, span_tokens, window_spans)
from tests.server import serve


# ---- the pure half -----------------------------------------------------------------------------
def test_sentence_spans_keep_offsets():
    assert sentence_spans("One. Two!  Three?\nFour") == [(0, 4), (5, 9), (11, 17), (18, 22)]
    assert sentence_spans("Pi is 3.14 here. Done") == [(0, 16), (17, 21)]  # no cut inside a number
    assert sentence_spans('He said "stop." Then left.') == [(0, 15), (16, 26)]  # the quote stays
    assert sentence_spans("\u4f60\u597d\u3002\u4e16\u754c") == [(0, 3), (3, 5)]  # a CJK full stop, no space
    assert sentence_spans("  \n\n ") == []
    text = "Alpha beta. Gamma, delta!\n\nEpsilon"
    assert sum(span_tokens(text, sentence_spans(text))) == count_tokens(text)


def test_group_spans_bounds_the_units():
    spans = [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert group_spans(spans, 5) == spans
    assert group_spans(spans, 2) == [(0, 5), (6, 9)]  # runs of ceil(5 / 2) = 3 sentences


def test_windows_either_side_of_each_gap():
    assert gap_windows(4, 1) == [((0, 1), (1, 2)), ((1, 2), (2, 3)), ((2, 3), (3, 4))]
    assert gap_windows(4, 2) == [((0, 1), (1, 3)), ((0, 2), (2, 4)), ((1, 3), (3, 4))]
    units = [(0, 3), (4, 9), (10, 12), (13, 20)]
    spans, lefts, rights = window_spans(units, 2)
    assert spans == [(0, 3), (0, 9), (4, 12), (10, 20), (13, 20)]
    assert [spans[i] for i in lefts] == [(0, 3), (0, 9), (4, 12)]
    assert [spans[i] for i in rights] == [(4, 12), (10, 20), (13, 20)]
    spans, lefts, rights = window_spans(units[:3], 1)
    assert spans == units[:3] and lefts == [0, 1] and rights == [1, 2]  # window 1: each sentence once
    # a window over max_chars keeps the side next to its gap: the left one its end, the right one its start
    spans, lefts, rights = window_spans(units, 2, max_chars=5)
    assert [spans[i] for i in lefts] == [(0, 3), (4, 9), (7, 12)]
    assert [spans[i] for i in rights] == [(4, 9), (10, 15), (13, 18)]


def test_adjacent_similarity_and_breakpoints():
    sims = adjacent_similarity(np.array([[1.0, 0.0], [1.0, 1.0], [3.0, 4.0]]),
                               np.array([[0.0, 1.0], [2.0, 2.0], [4.0, 3.0]]))
    assert sims.tolist() == pytest.approx([0.0, 1.0, 0.96])
    s = np.array([0.9, 0.2, 0.8, 0.1])
    assert breakpoints(s, threshold=0.5) == [1, 3]
    assert breakpoints(s, percentile=25) == [3]  # the 25th percentile is 0.175
    assert breakpoints(s, percentile=50) == [1, 3]  # the median is 0.5
    assert breakpoints(s) == [3]  # the default, the 10th percentile
    assert breakpoints(np.zeros(0)) == []


def test_pack_cuts_oversize_segments_at_their_weakest_gap():
    sims = np.array([0.5, 0.8, 0.1, 0.8, 0.5])
    assert pack([5] * 6, sims, [2], 0, 100) == [(0, 3), (3, 6)]
    assert pack([5] * 6, sims, [2], 0, 10) == [(0, 1), (1, 3), (3, 5), (5, 6)]
    assert pack([50], np.zeros(0), [], 0, 10) == [(0, 1)]  # one long sentence: cut later, the fixed way


def test_pack_joins_short_segments_across_the_more_similar_gap():
    # 2 tokens joins its only neighbour; then 3 tokens is between 12 (gap 0.6) and 10 (gap 0.9)
    assert pack([2, 10, 3, 10], np.array([0.3, 0.6, 0.9]), [0, 1, 2], 5, 15) == [(0, 2), (2, 4)]
    # it fits with neither: it stays short
    assert pack([20, 2, 20], np.array([0.5, 0.5]), [0, 1], 5, 21) == [(0, 1), (1, 2), (2, 3)]
    # a tie goes to the left
    assert pack([10, 2, 10], np.array([0.5, 0.5]), [0, 1], 5, 100) == [(0, 2), (2, 3)]


TEXT = "Cats purr. Cats nap. Stocks fell. Bonds rose."


def test_chunks_of_offsets_and_overlap():
    spans = sentence_spans(TEXT)
    cfg = SemanticConfig(threshold=0.5, max_tokens=100)
    sims = np.array([0.8, 0.1, 0.7])
    chunks = chunks_of(TEXT, spans, plan(span_tokens(TEXT, spans), sims, cfg), cfg)
    assert [(c.text, c.start_char, c.end_char) for c in chunks] == [
        ("Cats purr. Cats nap.", 0, 20), ("Stocks fell. Bonds rose.", 21, 45)]
    # overlap 2: the second chunk starts at "nap" (the first one's last two tokens: "nap", ".")
    cfg = SemanticConfig(threshold=0.5, max_tokens=8, overlap_tokens=2)
    chunks = chunks_of(TEXT, spans, plan(span_tokens(TEXT, spans), sims, cfg), cfg)
    assert [(c.start_char, c.end_char) for c in chunks] == [(0, 20), (16, 45)]
    assert all(count_tokens(c.text) <= 8 and TEXT[c.start_char:c.end_char] == c.text for c in chunks)


def test_a_sentence_over_max_tokens_is_cut_the_fixed_way():
    text = " ".join(f"w{i}" for i in range(30)) + "."
    cfg = SemanticConfig(max_tokens=10)
    spans = sentence_spans(text)
    chunks = chunks_of(text, spans, plan(span_tokens(text, spans), np.zeros(0), cfg), cfg)
    counts = [count_tokens(c.text) for c in chunks]  # words, then "w29." (2 tokens) whole
    assert counts == [10, 10, 9, 2] and sum(counts) == count_tokens(text)
    assert chunks[0].start_char == 0 and chunks[-1].end_char == len(text)


@pytest.mark.parametrize("cfg, param", [
    (SemanticConfig(threshold=0.3, percentile=10), "config.semantic.threshold"),
    (SemanticConfig(threshold=1.5), "config.semantic.threshold"),
    (SemanticConfig(percentile=100), "config.semantic.percentile"),
    (SemanticConfig(window=0), "config.semantic.window"),
    (SemanticConfig(min_tokens=20, max_tokens=10), "config.semantic.min_tokens"),
    (SemanticConfig(max_tokens=10, overlap_tokens=10), "config.text.overlap_tokens"),
])
def test_bad_configs_name_their_field(cfg, param):
    with pytest.raises(InvalidInput) as e:
        cfg.check()
    assert e.value.param == param


# ---- end to end: the built-in MiniLM embedder over HTTP ----------------------------------------
COOKING = ("Preheat the oven to two hundred degrees. Mix the flour with the butter and the sugar. "
           "Knead the dough until it is smooth and soft. Bake the bread for forty minutes. "
           "Let the loaf cool on a rack before slicing it.")
SPACE = ("Jupiter is the largest planet in the solar system. Dozens of moons orbit the giant planet. "
         "Saturn's rings are made of ice and rock. Telescopes reveal distant galaxies and nebulae. "
         "The planets circle the sun in elliptical orbits.")
DOC = COOKING + " " + SPACE


@pytest.fixture(scope="module")
def srv():
    with serve(builtins=True) as s:
        yield s


def chunk(srv, **config) -> httpx.Response:
    return httpx.post(srv.url + "/ai/v1/chunk", json={"input": DOC, "config": {"model": "semantic", **config}},
                      timeout=120)


@pytest.mark.slow
def test_semantic_is_listed_with_a_dense_embedder(srv):
    assert "semantic" in httpx.get(srv.url + "/ai/v1/models").json()["chunkers"]
    with serve() as bare:  # no embedder served: no semantic chunker
        assert list(httpx.get(bare.url + "/ai/v1/models").json()["chunkers"]) == ["fixed"]
        r = httpx.post(bare.url + "/ai/v1/chunk", json={"input": DOC, "config": {"model": "semantic"}})
        assert r.status_code == 404 and r.json()["error"] == "MODEL_NOT_FOUND"


@pytest.mark.slow
def test_splits_at_the_topic_change(srv):
    r = chunk(srv)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "semantic" and body["cache_hit"] is False
    assert [(c["start_char"], c["end_char"]) for c in body["data"]] == [(0, len(COOKING)),
                                                                     (len(COOKING) + 1, len(DOC))]
    assert [c["text"] for c in body["data"]] == [COOKING, SPACE]
    assert chunk(srv).json()["cache_hit"] is True
    # the same cut by an absolute threshold, with two sentences either side of each gap
    r = chunk(srv, semantic={"threshold": 0.15, "window": 2, "embedder": "all-MiniLM-L6-v2"}).json()
    assert [c["end_char"] for c in r["data"]] == [len(COOKING), len(DOC)], r


@pytest.mark.slow
def test_chunks_never_exceed_max_tokens(srv):
    for max_tokens in (12, 25, 40):
        r = chunk(srv, semantic={"max_tokens": max_tokens, "min_tokens": 5}).json()
        assert all(count_tokens(c["text"]) <= max_tokens for c in r["data"]), r
        assert all(DOC[c["start_char"]:c["end_char"]] == c["text"] for c in r["data"])
        assert len(COOKING) in [c["end_char"] for c in r["data"]]  # the topic change is still a cut
    # config.text's target_tokens is max_tokens's default; an explicit overlap is honoured
    r = chunk(srv, text={"target_tokens": 30, "overlap_tokens": 5}).json()
    assert all(count_tokens(c["text"]) <= 30 for c in r["data"])
    assert all(b["start_char"] < a["end_char"] for a, b in zip(r["data"], r["data"][1:]))


@pytest.mark.slow
@pytest.mark.parametrize("config, status, code", [
    ({"semantic": {"embedder": "no-such-embedder"}}, 404, "MODEL_NOT_FOUND"),
    ({"semantic": {"embedder": "splade-tiny"}}, 400, "MODEL_NOT_SUPPORTED"),  # sparse
    ({"semantic": {"embedder": "fixed"}}, 400, "MODEL_NOT_SUPPORTED"),  # not an embedder
    ({"semantic": {"window": 0}}, 400, "INVALID_REQUEST"),
    ({"semantic": {"threshold": 0.2, "percentile": 10}}, 400, "INVALID_REQUEST"),
    ({"semantic": {"breakpoint": "gradient"}}, 400, "INVALID_REQUEST"),  # an unknown option
    ({"semantic": {"min_tokens": 50, "max_tokens": 10}}, 400, "INVALID_REQUEST"),
    ({"model": "fixed", "semantic": {"threshold": 0.2}}, 400, "INVALID_REQUEST"),  # not for fixed
])
def test_bad_requests(srv, config, status, code):
    r = chunk(srv, **config)
    assert (r.status_code, r.json()["error"]) == (status, code), r.text


@pytest.mark.slow
def test_an_embedder_that_fails_falls_back_to_fixed(tmp_path):
    """The spec's rule for model chunkers: if the model fails, chunk the fixed way (and say so)."""
    import shutil
    from pathlib import Path

    broken = tmp_path / "embedders" / "broken"
    shutil.copytree(Path(__file__).parent / "fixtures" / "onnx" / "tiny-bert-embed", broken)
    (broken / "model.onnx").write_bytes(b"not an onnx graph")
    with serve(models_dir=str(tmp_path)) as s:
        assert "semantic" in httpx.get(s.url + "/ai/v1/models").json()["chunkers"]
        body = {"input": DOC, "config": {"model": "semantic", "text": {"target_tokens": 30, "overlap_tokens": 0}}}
        r = httpx.post(s.url + "/ai/v1/chunk", json=body, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "fixed" and r.json()["cache_hit"] is False
        assert all(count_tokens(c["text"]) <= 30 for c in r.json()["data"])
