"""Seq2seq pieces on their own: folder layouts and quantized variants, the logits processors
and sampling filters (transformers' rules), and loading through the service's loader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.registry.discovery import make_spec
from inferd.models import ModelKind
from inferd.runtimes.seq2seq.decoding import DecodeParams, Greedy, process
from inferd.runtimes.seq2seq.files import locate
from inferd.kinds.rewriter import load_rewriter
from inferd.service.rewriting import RewriteOptions

S2S = Path(__file__).parent / "fixtures" / "seq2seq"
T5 = json.loads((S2S / "reference-t5.json").read_text())


@pytest.mark.parametrize("folder,layout,roles", [
    ("tiny-t5-antfly", "antfly", {"encoder": "encoder.onnx", "init": "decoder-init.onnx", "past": "decoder.onnx"}),
    ("tiny-bart-optimum", "optimum", {"encoder": "encoder_model.onnx", "init": "decoder_model.onnx",
                                      "past": "decoder_with_past_model.onnx"}),
    ("tiny-t5-merged", "optimum-merged", {"encoder": "encoder_model.onnx", "merged": "decoder_model_merged.onnx"}),
    ("tiny-t5-ct2", "ctranslate2", {"model": "model.bin"}),
])
def test_layouts(folder, layout, roles):
    f = locate(S2S / folder, {})
    assert f.layout == layout
    assert {k: p.name for k, p in f.graphs.items()} == roles


def test_half_an_export_is_a_clear_load_error(tmp_path):
    for name in ("encoder.onnx", "decoder.onnx", "tokenizer.json"):
        shutil.copy(S2S / "tiny-t5-antfly" / name, tmp_path / name)
    with pytest.raises(ModelLoadFailed, match="decoder-init.onnx"):
        locate(tmp_path, {})
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadFailed, match="tokenizer.json"):
        locate(tmp_path, {})


def test_quantized_variants_are_preferred(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    d = tmp_path / "t5"
    shutil.copytree(S2S / "tiny-t5-optimum", d)
    for stem in ("encoder_model", "decoder_with_past_model"):
        quantize_dynamic(str(d / f"{stem}.onnx"), str(d / f"{stem}_quantized.onnx"), weight_type=QuantType.QInt8)
    f = locate(d, {})
    assert [f.graphs[r].name for r in ("encoder", "init", "past")] == \
        ["encoder_model_quantized.onnx", "decoder_model.onnx", "decoder_with_past_model_quantized.onnx"]
    assert locate(d, {}, prefer_quantized=False).graphs["past"].name == "decoder_with_past_model.onnx"
    assert locate(d, {"quantized": False}).graphs["encoder"].name == "encoder_model.onnx"
    # the quantized graphs load and decode (int8 weights: tokens may differ from float32)
    spec = make_spec("t5q", d, "cli", ModelKind.REWRITER)
    h = load_rewriter(spec)
    try:
        assert h.runtime.backend.graph_paths["past"].endswith("decoder_with_past_model_quantized.onnx")
        enc = h.runtime.prepare(T5["inputs"][:1])[0]
        hidden, mask = h.runtime.backend.encode([enc.ids], 0)
        logits, _ = h.runtime.backend.first(np.array([0]), hidden, mask)
        assert logits.shape == (1, h.runtime.vocab_size) and np.isfinite(logits).all()
    finally:
        h.close()


def _p(**kw) -> DecodeParams:
    return DecodeParams(**{"decoder_start": 0, "eos": (1,), "max_length": 10, **kw})


def test_no_repeat_ngram_bans_the_token_that_would_repeat_an_ngram():
    scores = np.zeros((1, 8), dtype=np.float32)
    out = process(_p(no_repeat_ngram_size=2), [[0, 5, 6, 5]], scores)
    assert np.isneginf(out[0, 6]) and np.isfinite(np.delete(out[0], 6)).all()  # (5, 6) seen: 6 banned after 5
    out = process(_p(no_repeat_ngram_size=3), [[0, 5, 6, 5]], scores)
    assert np.isfinite(out).all()  # (6, 5) never seen followed by anything


def test_forced_bos_eos_and_min_length():
    scores = np.arange(8, dtype=np.float32)[None]
    out = process(_p(forced_bos=3), [[0]], scores)
    assert out[0, 3] == 0 and np.isneginf(np.delete(out[0], 3)).all()
    out = process(_p(forced_eos=1), [[0] * 9], scores)  # cur_len == max_length - 1
    assert out[0, 1] == 0 and np.isneginf(np.delete(out[0], 1)).all()
    assert np.isfinite(process(_p(forced_eos=1), [[0] * 8], scores)).all()
    out = process(_p(min_length=3), [[0, 4]], scores)
    assert np.isneginf(out[0, 1]) and np.isfinite(process(_p(min_length=3), [[0, 4, 4]], scores)).all()


def test_sampling_is_seeded_and_top_p_keeps_the_head():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], dtype=np.float32))
    draw = lambda seed, **kw: [Greedy(_p(do_sample=True, seed=seed, max_length=1000, eos=(), **kw))  # noqa: E731
                               for _ in range(1)][0]
    g1, g2 = draw(5), draw(5)
    a = [g1._sample(logits[0]) for _ in range(200)]
    assert a == [g2._sample(logits[0]) for _ in range(200)]
    assert set(a) == {0, 1, 2, 3}
    g = draw(5, top_p=0.7)  # 0.5 + 0.3 reach 0.7: only the first two are kept
    assert set(g._sample(logits[0]) for _ in range(200)) == {0, 1}


def test_request_options_are_checked_against_the_model():
    spec = make_spec("t5", S2S / "tiny-bart-antfly", "cli", ModelKind.REWRITER)
    h = load_rewriter(spec)
    try:
        rw = h.runtime
        p = rw.params(RewriteOptions())
        assert (p.num_beams, p.max_length, p.length_penalty, p.no_repeat_ngram_size, p.forced_bos, p.forced_eos) == \
            (1, 18, 2.0, 3, 0, 2)
        assert rw.params(RewriteOptions(max_tokens=4)).max_length == 5
        with pytest.raises(InvalidInput, match="num_return_sequences"):
            rw.params(RewriteOptions(num_beams=2, num_return_sequences=3))
        assert rw.architecture == "BartForConditionalGeneration" and rw.max_length == 48
    finally:
        h.close()
