import httpx
import pytest

from inferd.errors import InvalidInput
from inferd.text.chunking import FixedConfig, count_tokens, fixed_chunks
from tests.server import serve

DOC = ("Inference servers batch requests. They share one decode step across many streams.\n\n"
       "Embeddings map text to vectors. Rerankers score a query against passages.\n\n"
       "Chunking splits long documents into windows that fit a model's context, with overlap so "
       "that a sentence cut at a boundary is still seen whole by one of the chunks.")


def test_offsets_index_the_original_text():
    chunks = fixed_chunks(DOC, FixedConfig(target_tokens=20, overlap_tokens=5))
    assert len(chunks) >= 3
    for c in chunks:
        assert DOC[c.start_char:c.end_char] == c.text
        assert count_tokens(c.text) <= 20
    assert chunks[0].start_char == 0 and chunks[-1].end_char == len(DOC)


def test_overlap_repeats_the_tail_of_the_previous_chunk():
    chunks = fixed_chunks(DOC, FixedConfig(target_tokens=20, overlap_tokens=5))
    for a, b in zip(chunks, chunks[1:]):
        assert b.start_char < a.end_char  # windows overlap
        shared = DOC[b.start_char:a.end_char]
        assert 1 <= count_tokens(shared) <= 5


def test_separator_is_preferred():
    chunks = fixed_chunks(DOC, FixedConfig(target_tokens=20, overlap_tokens=0))
    assert chunks[0].text.endswith("streams.")  # whole first paragraph, cut at the blank line
    both = fixed_chunks(DOC, FixedConfig(target_tokens=40, overlap_tokens=0))
    assert both[0].text.endswith("passages.")  # two paragraphs fit: packed greedily


def test_hard_windows_without_separators_and_max_chunks():
    text = "-".join(f"w{i}" for i in range(100))  # 199 tokens, no spaces
    chunks = fixed_chunks(text, FixedConfig(target_tokens=50, overlap_tokens=0, max_chunks=3))
    assert len(chunks) == 3 and all(count_tokens(c.text) <= 50 for c in chunks)


def test_overlap_must_be_smaller_than_target():
    with pytest.raises(InvalidInput, match="overlap_tokens"):
        fixed_chunks("a b c", FixedConfig(target_tokens=5, overlap_tokens=5))


def test_chunk_route_and_cache():
    with serve() as s:
        body = {"input": {"type": "text", "text": DOC},
                "config": {"model": "fixed", "max_chunks": 2, "text": {"target_tokens": 20, "overlap_tokens": 4}}}
        r = httpx.post(s.url + "/ai/v1/chunk", json=body).json()
        assert r["model"] == "fixed" and r["cache_hit"] is False and len(r["data"]) == 2
        assert r["data"][1] | {"index": 1, "id": 1, "object": "chunk", "mime_type": "text/plain"} == r["data"][1]
        assert r["usage"]["prompt_tokens"] == count_tokens(DOC)
        r2 = httpx.post(s.url + "/ai/v1/chunk", json=body).json()
        assert r2["cache_hit"] is True and r2["data"] == r["data"]
        body["config"]["text"]["overlap_tokens"] = 20
        bad = httpx.post(s.url + "/ai/v1/chunk", json=body)
        assert bad.status_code == 400 and bad.json()["error"] == "INVALID_REQUEST"
        legacy = httpx.post(s.url + "/ai/v1/chunk", json={"text": "short text"}).json()
        assert legacy["data"][0]["text"] == "short text"
