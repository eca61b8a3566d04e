"""Fields the Antfly spec names that inferd used to parse and drop (issue 27): extract
`inputs[].metadata` comes back on its item."""

from tests.extract_fixtures import extract_srv, post, reference  # noqa: F401

REF = reference("tiny-gliner")


def test_extract_metadata_is_echoed_per_item(extract_srv):
    meta = {"doc": "a-17", "page": 3, "tags": ["x", {"nested": True}]}
    res = post(extract_srv, {"model": "tiny-gliner", "schema": {"entities": REF["labels"]},
                             "inputs": [{"id": "a", "content": REF["texts"][0], "metadata": meta},
                                        {"content": REF["texts"][0]}]})
    assert res.status_code == 200, res.text
    a, b = res.json()["data"]
    assert a["id"] == "a" and a["metadata"] == meta
    assert "metadata" not in b  # none given, none returned
