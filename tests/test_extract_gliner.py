"""GLiNER span model (ONNX) against the gliner library's own outputs on the same weights:
entities (flat and nested, two thresholds), multitask relations, batching, long-text windows."""

from __future__ import annotations

import pytest

from inferd.extraction_types import ExtractOptions, RelationSpec
from inferd.registry.discovery import make_spec
from inferd.models import ModelKind
from inferd.runtimes.extract import load_extractor
from tests.extract_fixtures import ONNX, extract_srv, post, reference  # noqa: F401

REF = reference("tiny-gliner")


@pytest.fixture(scope="module")
def rt():
    r = load_extractor(make_spec("tiny-gliner", ONNX / "tiny-gliner", "cli", ModelKind.EXTRACTOR))
    yield r
    r.close()


def run(rt, text, labels, opts):
    pieces = rt.prepare_entities(text, labels, opts)
    return rt.entities(text, labels, opts, pieces, rt.run_batch(pieces))


def same(got, exp):
    assert [(e.label, e.start, e.end, e.text) for e in got] == [(x["label"], x["start"], x["end"], x["text"]) for x in exp]
    for e, x in zip(got, exp):
        assert e.score == pytest.approx(x["score"], abs=1e-4)


@pytest.mark.parametrize("mode", ["flat", "nested"])
@pytest.mark.parametrize("th", ["0.5", "0.7"])
def test_entities_match_gliner(rt, mode, th):
    opts = ExtractOptions(threshold=float(th), flat_ner=mode == "flat")
    total = 0
    for text, exp in zip(REF["texts"], REF[mode][th]):
        got = run(rt, text, REF["labels"], opts)
        same(got, exp)
        total += len(got)
    assert total > 0  # the fixture's thresholds find spans


def test_nested_keeps_overlaps_flat_does_not(rt):
    text = REF["texts"][2]
    flat = run(rt, text, REF["labels"], ExtractOptions(threshold=0.5, flat_ner=True))
    nested = run(rt, text, REF["labels"], ExtractOptions(threshold=0.5, flat_ner=False))
    spans = sorted((e.start, e.end) for e in flat)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # flat: no overlap
    assert len(nested) > len(flat)


def test_batched_equals_one_by_one(rt):
    opts = ExtractOptions(threshold=0.5)
    groups = [rt.prepare_entities(t, REF["labels"], opts) for t in REF["texts"]]
    outs = rt.run_batch([p for g in groups for p in g])
    k = 0
    for text, g, exp in zip(REF["texts"], groups, REF["flat"]["0.5"]):
        same(rt.entities(text, REF["labels"], opts, g, outs[k:k + len(g)]), exp)
        k += len(g)


def test_relations_match_gliner_multitask(rt):
    r = REF["relations"]
    opts = ExtractOptions(threshold=r["threshold"])
    rels = [RelationSpec(x) for x in r["relations"]]
    n = 0
    for text, found in zip(REF["texts"], r["found"]):
        ents = run(rt, text, REF["labels"], opts)
        pieces = rt.prepare_relations(text, ents, rels, opts)
        got = rt.relations(text, ents, rels, opts, pieces, rt.run_batch(pieces))
        # gliner may relate an entity to itself; inferd leaves such self-loops out.
        exp = [f for f in found if (ents[[e.text for e in ents].index(f["source"])].start, ents[[e.text for e in ents]
                                    .index(f["source"])].end) != (f["start"], f["end"])]
        assert [(x.type, ents[x.source].text, ents[x.target].start, ents[x.target].end) for x in got] == \
            [(f["relation"], f["source"], f["start"], f["end"]) for f in exp]
        for x, f in zip(got, exp):
            assert x.score == pytest.approx(f["score"], abs=1e-4)
        n += len(got)
    assert n >= 2


def test_long_text_runs_in_windows(rt):
    """A text longer than the model's 32-word window: entities come from every part of it,
    with offsets into the original text, and flat spans never overlap."""
    text = " ".join(REF["texts"] * 5)
    assert len(text.split()) > 3 * 32
    pieces = rt.prepare_entities(text, REF["labels"], ExtractOptions(threshold=0.5))
    assert len(pieces) > 3
    got = rt.entities(text, REF["labels"], ExtractOptions(threshold=0.5), pieces, rt.run_batch(pieces))
    assert all(text[e.start:e.end] == e.text for e in got)
    assert max(e.start for e in got) > len(text) * 3 // 4
    spans = sorted((e.start, e.end) for e in got)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_http_entities_and_relations(extract_srv):
    r = REF["relations"]
    body = {"model": "tiny-gliner", "inputs": [{"id": f"doc{i}", "content": t} for i, t in enumerate(REF["texts"])],
            "schema": {"entities": REF["labels"], "relations": [{"type": x} for x in r["relations"]]},
            "options": {"threshold": r["threshold"]}}
    res = post(extract_srv, body)
    assert res.status_code == 200, res.text
    out = res.json()
    assert out["object"] == "extraction" and out["model"] == "tiny-gliner"
    assert [d["id"] for d in out["data"]] == ["doc0", "doc1", "doc2"]
    for d, exp in zip(out["data"], REF["flat"]["0.5"]):
        assert [(e["label"], e["start"], e["end"], e["text"]) for e in d["entities"]] == \
            [(x["label"], x["start"], x["end"], x["text"]) for x in exp]
        assert [e["score"] for e in d["entities"]] == pytest.approx([x["score"] for x in exp], abs=1e-4)
    rel0 = out["data"][0]["relations"]
    assert rel0 and rel0[0]["type"] == "answers"
    ents0 = out["data"][0]["entities"]
    assert ents0[rel0[0]["source"]["entity_index"]]["text"] == "the lazy dog."
    assert (ents0[rel0[0]["target"]["entity_index"]]["start"], ents0[rel0[0]["target"]["entity_index"]]["end"]) == (10, 15)
    assert out["usage"]["prompt_tokens"] > 0


def test_http_options_shape(extract_srv):
    body = {"model": "tiny-gliner", "inputs": [{"content": REF["texts"][0]}], "schema": {"entities": REF["labels"]},
            "options": {"threshold": 0.5, "include_confidence": False, "include_spans": False}}
    e = post(extract_srv, body).json()["data"][0]["entities"]
    assert e and all(set(x) == {"label", "text"} for x in e)


def test_relation_source_label_filter(extract_srv):
    body = {"model": "tiny-gliner", "inputs": [{"content": REF["texts"][0]}],
            "schema": {"entities": REF["labels"], "relations": [{"type": "answers", "source": "weather"}]},
            "options": {"threshold": 0.5}}
    d = post(extract_srv, body).json()["data"][0]
    assert d["relations"] == []  # the source of 'answers' here is an animal, not weather


def test_many_labels_split_into_prompt_groups(rt):
    """64 labels do not fit the fixture's 128-token window in one prompt: they run as groups,
    and every label can still be found (a label's spans come from its own group's passes)."""
    labels = [f"label {i}" for i in range(60)] + REF["labels"]
    groups = rt._label_groups(labels, reserve=34)
    assert len(groups) > 1 and [x for _, g in groups for x in g] == labels
    opts = ExtractOptions(threshold=0.5)
    got = run(rt, REF["texts"][0], labels, opts)
    assert got and {e.label for e in got} <= set(labels)
    assert all(REF["texts"][0][e.start:e.end] == e.text for e in got)


def test_long_text_relations_read_the_prompt_in_every_window(rt):
    from inferd.runtimes.extract.gliner import REL_PROMPT, REL_SEP, split_words

    text = " ".join(REF["texts"] * 5)
    opts = ExtractOptions(threshold=0.5)
    ents = run(rt, text, REF["labels"], opts)
    rels = [RelationSpec(x) for x in REF["relations"]["relations"]]
    pieces = rt.prepare_relations(text, ents, rels, opts)
    lead = len(split_words(REL_PROMPT + REL_SEP))
    assert len(pieces) > 1
    assert all(list(p.data.word_map[:lead]) == list(range(lead)) for p in pieces)
    assert any(p.data.word_map[lead] > lead for p in pieces)  # later windows start further into the text
    got = rt.relations(text, ents, rels, opts, pieces, rt.run_batch(pieces))
    assert got and all(0 <= r.source < len(ents) and 0 <= r.target < len(ents) and r.source != r.target for r in got)
    assert max(ents[r.target].start for r in got) > len(text) // 2  # found beyond the first window
