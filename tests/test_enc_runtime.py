"""ONNX encoder runtimes against reference outputs computed by transformers
(scripts/make_tiny_encoders.py): embeddings, sparse vectors, cross-encoder and MaxSim scores,
token-classifier probabilities, each within 1e-4."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.registry.discovery import make_spec
from inferd.models import ModelKind
from inferd.runtimes.onnx import load_chunker, load_embedder, load_reranker
from inferd.runtimes.onnx.files import pick_graph
from inferd.runtimes.onnx.graphs import bert_from_safetensors, read_safetensors

ONNX = Path(__file__).parent / "fixtures" / "onnx"
TOL = 1e-4


def ref(name):
    return json.loads((ONNX / name / "reference.json").read_text())


def spec(name, kind=ModelKind.EMBEDDER, path=None):
    return make_spec(name, path or ONNX / name, "cli", kind)


def run(rt, texts, task=None):
    return rt.run_batch(rt.prepare(texts, task))


@pytest.fixture(scope="module")
def embedder():
    rt = load_embedder(spec("tiny-bert-embed"))
    yield rt
    rt.close()


def test_dense_mean_pooling_matches_transformers(embedder):
    r = ref("tiny-bert-embed")
    out = np.stack(run(embedder, r["sentences"]))
    assert embedder.dims == 32 and embedder.pooling == "mean"
    np.testing.assert_allclose(out, np.array(r["mean"]), atol=TOL)
    assert [len(e) for e in embedder.prepare(r["sentences"])] == r["token_counts"]
    # one at a time gives the same numbers as the padded batch
    np.testing.assert_allclose(run(embedder, [r["sentences"][2]])[0], out[2], atol=TOL)


def test_cls_pooling_from_manifest(tmp_path):
    d = tmp_path / "cls"
    shutil.copytree(ONNX / "tiny-bert-embed", d)
    (d / "model_manifest.json").write_text(json.dumps({"pooling": "cls"}))
    rt = load_embedder(spec("cls", path=d))
    r = ref("tiny-bert-embed")
    np.testing.assert_allclose(np.stack(run(rt, r["sentences"])), np.array(r["cls"]), atol=TOL)
    rt.close()


def test_task_prefixes_change_the_input(embedder):
    plain = embedder.prepare(["rain"])[0]
    q = embedder.prepare(["rain"], "RETRIEVAL_QUERY")[0]
    d = embedder.prepare(["rain"], "search_document")[0]
    assert embedder.tokenizer.tok.decode(list(q.ids)).startswith("query :")  # "query: " prefix
    assert plain.ids != q.ids != d.ids
    with pytest.raises(InvalidInput, match="task_type"):
        embedder.prepare(["rain"], "NOT_A_TASK")


def test_truncation_rule(embedder):
    long = "fox " * 200
    e = embedder.prepare([long])[0]
    assert len(e) == embedder.max_length == 64 and e.truncated
    assert e.ids[0] == embedder.tokenizer.prefix[0] and e.ids[-1] == embedder.tokenizer.suffix[-1]
    assert not embedder.prepare(["fox"])[0].truncated
    ids = embedder.prepare_ids([20, 21, 22])
    assert ids.ids == embedder.tokenizer.prefix + (20, 21, 22) + embedder.tokenizer.suffix
    with pytest.raises(InvalidInput, match="vocabulary"):
        embedder.prepare_ids([10**6])


def test_sparse_splade_matches_transformers():
    rt = load_embedder(spec("tiny-bert-splade"))
    assert rt.sparse and rt.top_k == 16
    r = ref("tiny-bert-splade")
    for got, want in zip(run(rt, r["sentences"]), r["sparse"]):
        assert got.indices.tolist() == want["indices"]
        np.testing.assert_allclose(got.values, want["values"], atol=TOL)
        assert (np.diff(got.indices) > 0).all() and (got.values > 0).all()
    rt.close()


def test_sparse_from_safetensors_without_an_onnx_export():
    s = spec("tiny-bert-splade-safetensors")
    assert s.format == "safetensors" and "sparse" in s.capabilities
    rt = load_embedder(s)
    r = ref("tiny-bert-splade")
    for got, want in zip(run(rt, r["sentences"]), r["sparse"]):
        assert got.indices.tolist() == want["indices"]
        np.testing.assert_allclose(got.values, want["values"], atol=TOL)
    rt.close()


def test_safetensors_reader_and_dense_graph():
    w = read_safetensors(ONNX / "tiny-bert-splade-safetensors" / "model.safetensors")
    assert w["bert.embeddings.word_embeddings.weight"].shape == (144, 32)
    cfg = json.loads((ONNX / "tiny-bert-splade-safetensors" / "config.json").read_text())
    assert len(bert_from_safetensors(ONNX / "tiny-bert-splade-safetensors" / "model.safetensors", cfg,
                                     mlm_head=False)) > 10_000
    with pytest.raises(ModelLoadFailed, match="BERT"):
        bert_from_safetensors(ONNX / "tiny-bert-splade-safetensors" / "model.safetensors",
                              {**cfg, "model_type": "t5"}, mlm_head=True)


def test_cross_encoder_matches_transformers():
    rt = load_reranker(spec("tiny-bert-rerank", ModelKind.RERANKER))
    r = ref("tiny-bert-rerank")
    encs = rt.prepare(r["query"], r["documents"])
    assert encs[0].type_ids[-1] == 1  # the document is segment B
    scores = rt.combine(rt.run_batch(encs), len(r["documents"]))
    np.testing.assert_allclose(scores, r["scores"], atol=TOL)
    rt.close()


def test_late_interaction_maxsim_matches_transformers(tmp_path):
    d = tmp_path / "colbert"
    shutil.copytree(ONNX / "tiny-bert-embed", d)
    (d / "model_manifest.json").write_text(json.dumps({"type": "reranker", "capabilities": ["late_interaction"]}))
    s = spec("colbert", ModelKind.RERANKER, d)
    rt = load_reranker(s)
    assert rt.late_interaction
    r = ref("tiny-bert-embed")
    scores = rt.combine(rt.run_batch(rt.prepare(r["query"], r["documents"])), len(r["documents"]))
    np.testing.assert_allclose(scores, r["maxsim"], atol=TOL)
    rt.close()


def test_token_classifier_probabilities_match_transformers():
    rt = load_chunker(spec("tiny-bert-chunker", ModelKind.CHUNKER))
    r = ref("tiny-bert-chunker")
    assert rt.boundary == 1
    windows = rt.windows(r["text"])
    assert len(windows) == 1 and [list(o) for o in windows[0].offsets] == r["offsets"][1:-1]
    probs = rt.run_batch([w.enc for w in windows])[0]
    np.testing.assert_allclose(probs, r["boundary_probs"][1:-1], atol=TOL)
    rt.close()


def test_long_texts_run_as_several_windows():
    rt = load_chunker(spec("tiny-bert-chunker", ModelKind.CHUNKER))
    text = "the quick brown fox. " * 40
    windows = rt.windows(text)
    assert len(windows) > 1 and all(len(w.enc) <= rt.max_length for w in windows)
    assert windows[-1].offsets[-1][1] == len(text.rstrip())
    rt.close()


def test_quantized_variant_is_preferred(tmp_path):
    names = ["model.onnx", "model_quantized.onnx", "model_int8.onnx", "decoder_model.onnx"]
    paths = [tmp_path / n for n in names]
    assert pick_graph(paths, {}).name == "model_quantized.onnx"
    assert pick_graph(paths, {"quantized": False}).name == "model.onnx"
    assert pick_graph(paths, {}, prefer_quantized=False).name == "model.onnx"
    assert pick_graph([tmp_path / "model.onnx", tmp_path / "model-i8.onnx"], {}).name == "model-i8.onnx"
    d = tmp_path / "q"
    shutil.copytree(ONNX / "tiny-bert-embed", d)
    shutil.copy(d / "model.onnx", d / "model_quantized.onnx")
    rt = load_embedder(spec("q", path=d))
    assert rt.graph_path.endswith("model_quantized.onnx")
    rt.close()


def test_missing_tokenizer_is_a_load_error(tmp_path):
    d = tmp_path / "notok"
    shutil.copytree(ONNX / "tiny-bert-embed", d)
    (d / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadFailed, match="tokenizer.json"):
        load_embedder(spec("notok", path=d))
