"""A large encoder batch runs as concurrent shards on one onnxruntime session
(runtimes/onnx/encoders.py): the cut is contiguous and balanced, and every kind of encoder
answers a sharded batch with exactly what the reference (transformers, via the fixtures'
reference.json) and a one-pass run give, in input order."""

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from inferd.models import ModelKind
from inferd.registry.discovery import make_spec
from inferd.runtimes.onnx import load_chunker, load_embedder, load_reranker
from inferd.runtimes.onnx.encoders import SHARD_MIN_ITEMS, shards
from inferd.runtimes.options import RuntimeOptions

ONNX = Path(__file__).parent / "fixtures" / "onnx"
TOL = 1e-4


def ref(name):
    return json.loads((ONNX / name / "reference.json").read_text())


def spec(name, kind=ModelKind.EMBEDDER, path=None):
    return make_spec(name, path or ONNX / name, "cli", kind)


def covers(parts, n):
    """Contiguous, in order, covering 0..n exactly once."""
    return [p.start for p in parts] == [0] + [p.stop for p in parts[:-1]] and parts[-1].stop == n


def test_small_batches_stay_one_pass():
    assert shards([], 2) == []
    assert shards([30] * 7, 2) == [slice(0, 7)]                 # fewer than 2 x SHARD_MIN_ITEMS items
    assert shards([5] * 32, 2) == [slice(0, 32)]                # 160 padded tokens: too little work to split
    assert shards([30] * 64, 1) == [slice(0, 64)]               # one thread: nothing to run beside it


def test_shards_are_contiguous_and_balanced_by_tokens():
    lengths = sorted([12, 14, 15, 18, 20, 22, 25, 26, 28, 30, 31, 33, 35, 38, 40, 44] * 2)
    parts = shards(lengths, 2)
    assert len(parts) == 2 and covers(parts, len(lengths))
    a, b = (sum(lengths[p]) for p in parts)
    assert abs(a - b) <= max(lengths)  # cut where the running sum crosses half the tokens
    # the sorted batch's short half gets more items than its long half
    assert parts[0].stop - parts[0].start > parts[1].stop - parts[1].start
    four = shards([30] * 64, 4)
    assert [p.stop - p.start for p in four] == [16, 16, 16, 16] and covers(four, 64)
    for most in (2, 3, 8):
        parts = shards([30] * 10, most)
        assert covers(parts, 10) and all(p.stop - p.start >= SHARD_MIN_ITEMS for p in parts)


@pytest.fixture(scope="module")
def embedder():
    rt = load_embedder(spec("tiny-bert-embed"), RuntimeOptions(threads=2))
    yield rt
    rt.close()


def test_sharded_embeddings_equal_reference_and_one_pass(embedder):
    r = ref("tiny-bert-embed")
    texts = r["sentences"] * 8  # enough items and tokens for two shards
    encs = embedder.prepare(texts)
    assert embedder.parallel == 2 and len(shards([len(e) for e in encs], 2)) == 2
    ran_on = set()
    run_pass = embedder.run_pass

    def spy(part):
        ran_on.add(threading.get_ident())
        return run_pass(part)

    embedder.run_pass = spy  # the instance's: sees which threads ran the shards
    try:
        out = np.stack(embedder.run_batch(encs))
    finally:
        del embedder.run_pass
    assert len(ran_on) == 2  # the worker's own thread and one shard thread
    ref_mean = np.array(r["mean"] * 8)
    np.testing.assert_allclose(out, ref_mean, atol=TOL)
    np.testing.assert_allclose(out, np.stack(embedder.run_pass(encs)), atol=1e-6)


def test_a_failing_shard_fails_the_batch_after_every_shard_ended(embedder):
    encs = embedder.prepare(ref("tiny-bert-embed")["sentences"] * 8)
    finished = []
    run_pass = embedder.run_pass

    def flaky(part):
        if part[0] is encs[0]:
            raise RuntimeError("boom")
        out = run_pass(part)
        finished.append(len(part))
        return out

    embedder.run_pass = flaky
    try:
        with pytest.raises(RuntimeError, match="boom"):
            embedder.run_batch(encs)
    finally:
        del embedder.run_pass
    assert sum(finished) == len(encs) - shards([len(e) for e in encs], 2)[0].stop  # the other shard ran to its end


def test_sharded_rerank_and_late_interaction_equal_reference(tmp_path):
    rt = load_reranker(spec("tiny-bert-rerank", ModelKind.RERANKER), RuntimeOptions(threads=2))
    r = ref("tiny-bert-rerank")
    docs = r["documents"] * 8
    encs = rt.prepare(r["query"], docs)
    assert len(shards([len(e) for e in encs], 2)) == 2
    np.testing.assert_allclose(rt.combine(rt.run_batch(encs), len(docs)), r["scores"] * 8, atol=TOL)
    rt.close()

    d = tmp_path / "colbert"
    shutil.copytree(ONNX / "tiny-bert-embed", d)
    (d / "model_manifest.json").write_text(json.dumps({"type": "reranker", "capabilities": ["late_interaction"]}))
    rt = load_reranker(spec("colbert", ModelKind.RERANKER, d), RuntimeOptions(threads=2))
    r = ref("tiny-bert-embed")
    docs = r["documents"] * 12
    encs = rt.prepare(r["query"], docs)
    assert len(shards([len(e) for e in encs], 2)) == 2
    np.testing.assert_allclose(rt.combine(rt.run_batch(encs), len(docs)), r["maxsim"] * 12, atol=TOL)
    rt.close()


def test_sharded_token_classifier_equals_reference():
    rt = load_chunker(spec("tiny-bert-chunker", ModelKind.CHUNKER), RuntimeOptions(threads=2))
    r = ref("tiny-bert-chunker")
    windows = rt.windows(r["text"]) * 16
    assert len(shards([len(w.enc) for w in windows], 2)) == 2
    for probs in rt.run_batch([w.enc for w in windows]):
        np.testing.assert_allclose(probs, r["boundary_probs"][1:-1], atol=TOL)
    rt.close()
