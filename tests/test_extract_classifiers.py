"""Token-classifier NER and sequence classifiers (fixed labels, zero-shot NLI) over HTTP,
against transformers' pipelines on the same weights (references in the fixture folders)."""

from __future__ import annotations

import pytest

from tests.extract_fixtures import extract_srv, post, reference  # noqa: F401

NER, TOPIC, NLI = reference("tiny-bert-ner"), reference("tiny-bert-topic"), reference("tiny-bert-nli")


def test_ner_matches_hf_simple_aggregation(extract_srv):
    body = {"model": "tiny-ner", "inputs": [{"content": t} for t in NER["texts"]],
            "schema": {"entities": ["per", "Org", "LOC"]},  # matched to the model's labels case-insensitively
            "options": {"threshold": 0}}
    res = post(extract_srv, body)
    assert res.status_code == 200, res.text
    multi = 0
    for d, text, exp in zip(res.json()["data"], NER["texts"], NER["entities"]):
        assert [(e["label"], e["start"], e["end"]) for e in d["entities"]] == \
            [(x["entity_group"], x["start"], x["end"]) for x in exp]
        assert [e["score"] for e in d["entities"]] == pytest.approx([x["score"] for x in exp], abs=1e-4)
        assert all(e["text"] == text[e["start"]:e["end"]] for e in d["entities"])
        multi += sum(" " in e["text"] for e in d["entities"])
    assert sum(len(x) for x in NER["entities"]) > 5


def test_ner_label_subset_and_threshold(extract_srv):
    body = {"model": "tiny-ner", "inputs": [{"content": NER["texts"][0]}], "schema": {"entities": ["ORG"]},
            "options": {"threshold": 0.5}}
    got = post(extract_srv, body).json()["data"][0]["entities"]
    exp = [x for x in NER["entities"][0] if x["entity_group"] == "ORG" and x["score"] >= 0.5]
    assert [(e["start"], e["end"]) for e in got] == [(x["start"], x["end"]) for x in exp]


def test_ner_unknown_label_is_reported(extract_srv):
    res = post(extract_srv, {"model": "tiny-ner", "inputs": [{"content": "a b"}], "schema": {"entities": ["PER", "DRUG"]}})
    assert res.status_code == 400
    assert res.json()["error"] == "INVALID_REQUEST"
    assert "'DRUG'" in res.json()["message"] and "PER" in res.json()["message"]


def test_ner_cannot_do_relations(extract_srv):
    res = post(extract_srv, {"model": "tiny-ner", "inputs": [{"content": "a b"}],
                             "schema": {"entities": ["PER"], "relations": [{"type": "works_for"}]}})
    assert res.status_code == 400
    assert res.json()["error"] == "MODEL_NOT_SUPPORTED" and "relations" in res.json()["message"]


def test_fixed_classifier_softmax_and_sigmoid(extract_srv):
    body = {"model": "tiny-topic", "inputs": [{"content": t} for t in TOPIC["texts"]],
            "schema": {"classifications": [{"name": "topic", "labels": []},
                                           {"name": "tags", "labels": ["Cooking", "weather", "computing"],
                                            "multi_label": True}]},
            "options": {"threshold": 0}}
    res = post(extract_srv, body)
    assert res.status_code == 200, res.text
    for d, soft, sig in zip(res.json()["data"], TOPIC["softmax"], TOPIC["sigmoid"]):
        top, *tags = d["classifications"]
        assert (top["name"], top["label"]) == ("topic", soft[0]["label"])
        assert top["score"] == pytest.approx(soft[0]["score"], abs=1e-4)
        assert [t["name"] for t in tags] == ["tags"] * 3
        assert [t["label"] for t in tags] == [s["label"] for s in sig]
        assert [t["score"] for t in tags] == pytest.approx([s["score"] for s in sig], abs=1e-4)


def test_fixed_classifier_multi_label_threshold(extract_srv):
    sig = TOPIC["sigmoid"][0]
    cut = (sig[0]["score"] + sig[1]["score"]) / 2
    body = {"model": "tiny-topic", "inputs": [{"content": TOPIC["texts"][0]}],
            "schema": {"classifications": [{"name": "tags", "multi_label": True}]}, "options": {"threshold": cut}}
    got = post(extract_srv, body).json()["data"][0]["classifications"]
    assert [c["label"] for c in got] == [sig[0]["label"]]


def test_fixed_classifier_unknown_class(extract_srv):
    res = post(extract_srv, {"model": "tiny-topic", "inputs": [{"content": "x"}],
                             "schema": {"classifications": [{"name": "t", "labels": ["sports"]}]}})
    assert res.status_code == 400 and "'sports'" in res.json()["message"]


def test_zero_shot_nli_single_and_multi(extract_srv):
    body = {"model": "tiny-nli", "inputs": [{"content": t} for t in NLI["texts"]],
            "schema": {"classifications": [{"name": "topic", "labels": NLI["labels"]},
                                           {"name": "tags", "labels": NLI["labels"], "multi_label": True}]},
            "options": {"threshold": 0}}
    res = post(extract_srv, body)
    assert res.status_code == 200, res.text
    for d, single, multi in zip(res.json()["data"], NLI["single"], NLI["multi"]):
        top, *tags = d["classifications"]
        assert top["label"] == single["labels"][0]
        assert top["score"] == pytest.approx(single["scores"][0], abs=1e-4)
        assert [t["label"] for t in tags] == multi["labels"]
        assert [t["score"] for t in tags] == pytest.approx(multi["scores"], abs=1e-4)


def test_zero_shot_needs_labels(extract_srv):
    res = post(extract_srv, {"model": "tiny-nli", "inputs": [{"content": "x"}],
                             "schema": {"classifications": [{"name": "t"}]}})
    assert res.status_code == 400 and "needs labels" in res.json()["message"]


def test_classifier_cannot_do_entities(extract_srv):
    res = post(extract_srv, {"model": "tiny-nli", "inputs": [{"content": "x"}], "schema": {"entities": ["person"]}})
    assert res.status_code == 400 and "entities" in res.json()["message"]
