"""Pix2Struct readers (a tiny random-weight Pix2StructForConditionalGeneration, VQA, exported
in optimum's ONNX layout by scripts/make_tiny_readers.py): the numpy flattened-patch
preprocessing (question header, per-image normalisation, antialiased resize, row/col ids,
padding mask) equal to transformers' processor, and token ids equal to `generate` (greedy and
2 beams), in the runtime and over HTTP."""

from __future__ import annotations

import json
import shutil

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.errors import InvalidInput
from inferd.runtimes.onnx.pix2struct import Pix2StructReader, _aa_weights
from inferd.types import ReadItem
from tests.conftest import FIXTURES
from tests.server import serve
from tests.vision_helpers import data_uri

P2S = FIXTURES / "readers" / "pix2struct-tiny"
REF = json.loads((P2S / "reference.json").read_text())


def _image(i):
    return Image.open(P2S / f"image{i}.png").convert("RGB")


@pytest.fixture(scope="module")
def rt():
    return Pix2StructReader("pix2struct-tiny", P2S, threads=1)


def test_flattened_patches_equal_hf_processor(rt):
    fp, am = np.load(P2S / "flattened_patches.npy"), np.load(P2S / "attention_mask.npy")
    k = 0
    for i in range(2):
        for q in REF["questions"]:
            patches, mask = rt.prep(np.asarray(_image(i)), q)
            assert patches.shape == fp[k].shape == (48, 2 + 8 * 8 * 3)
            assert np.array_equal(mask, am[k]) and 0 < mask.sum() < 48  # some padding rows
            assert float(np.abs(patches - fp[k]).max()) <= 1e-4
            k += 1


def test_antialias_weights_rows_sum_to_one():
    w = _aa_weights(236, 48)
    assert w.shape == (48, 236) and np.allclose(w.sum(axis=1), 1.0)
    assert np.allclose(_aa_weights(16, 16), np.eye(16))  # no resize: the identity


def test_tokens_equal_reference_greedy_and_beam(rt):
    assert {c["num_beams"] for c in REF["cases"]} == {1, 2}
    for c in REF["cases"]:
        out = rt.run_batch([ReadItem(np.asarray(_image(c["image"])), c["prompt"], REF["max_new_tokens"])],
                           num_beams=c["num_beams"])[0]
        assert out.tokens == c["tokens"], c


def test_decoders_take_optimums_decoder_attention_mask(rt):
    assert "decoder_attention_mask" in {i.name for i in rt.decoder.get_inputs()}
    assert "decoder_attention_mask" in {i.name for i in rt.with_past.get_inputs()}


def test_merged_decoder_tokens_equal_reference(tmp_path):
    d = tmp_path / "p2s-merged"
    shutil.copytree(P2S, d)
    (d / "decoder_model.onnx").unlink()
    (d / "decoder_with_past_model.onnx").unlink()
    merged = Pix2StructReader("p2s-merged", d, threads=1)
    assert merged.merged
    for c in REF["cases"]:
        out = merged.run_batch([ReadItem(np.asarray(_image(c["image"])), c["prompt"], REF["max_new_tokens"])],
                               num_beams=c["num_beams"])[0]
        assert out.tokens == c["tokens"], c


def test_font_in_the_folder_draws_the_header(tmp_path, rt):
    """A .ttf beside the model (the hub's Arial.TTF) is the header font; without one the
    header is drawn with Pillow's built-in font, as the fixture's reference was."""
    from pathlib import Path

    fonts = sorted(Path("/usr/share/fonts").rglob("*.ttf"))
    if not fonts:
        pytest.skip("no system .ttf to stand in for Arial.TTF")
    d = tmp_path / "p2s-font"
    shutil.copytree(P2S, d)
    shutil.copy(fonts[0], d / "Arial.TTF")
    other = Pix2StructReader("p2s-font", d, threads=1)
    img, q = np.asarray(_image(0)), REF["questions"][0]
    assert other.prep.font == fonts[0].read_bytes() and rt.prep.font is None
    assert not np.array_equal(other.prep.header(img, q), rt.prep.header(img, q))


def test_captioning_model_reads_without_header_or_prompt(tmp_path):
    """The same weights as a non-VQA model (is_vqa false): no header, no prompt; patches and
    tokens equal the processor's and generate's."""
    d = tmp_path / "p2s-plain"
    shutil.copytree(P2S, d)
    for f in ("preprocessor_config.json", "config.json"):
        cfg = json.loads((d / f).read_text())
        (d / f).write_text(json.dumps({**cfg, "is_vqa": False}))
    plain = Pix2StructReader("p2s-plain", d, threads=1)
    for c in REF["plain"]:
        img = np.asarray(_image(c["image"]))
        patches, mask = plain.prep(img, None)
        assert int(mask.sum()) == c["n_patches"] and abs(float(patches.astype(np.float64).sum()) - c["patches_sum"]) < 1e-3
        out = plain.run_batch([ReadItem(img, None, REF["max_new_tokens"])], num_beams=1)[0]
        assert out.tokens == c["tokens"]
    with pytest.raises(InvalidInput, match="takes no prompt"):
        plain.check(ReadItem(np.asarray(_image(0)), "What is this?", 12))


def test_batch_equals_single_runs(rt):
    cases = [c for c in REF["cases"] if c["num_beams"] == 1]
    outs = rt.run_batch([ReadItem(np.asarray(_image(c["image"])), c["prompt"], REF["max_new_tokens"]) for c in cases])
    assert [o.tokens for o in outs] == [c["tokens"] for c in cases]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    shutil.copytree(P2S, models / "readers" / "pix2struct-tiny")
    with serve(models_dir=str(models), threads=1) as s:
        yield s


def test_http_question_answers_match_reference(srv):
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(P2S / "tokenizer.json"))
    for c in [c for c in REF["cases"] if c["num_beams"] == 1]:
        r = httpx.post(srv.url + "/ai/v1/read", timeout=120,
                       json={"model": "pix2struct-tiny", "prompt": c["prompt"], "max_tokens": REF["max_new_tokens"],
                             "images": [{"url": data_uri(_image(c["image"]))}]})
        assert r.status_code == 200, r.text
        assert r.json()["data"][0]["text"] == tok.decode(c["tokens"][1:], skip_special_tokens=True).strip()
        assert r.json()["usage"]["completion_tokens"] == len(c["tokens"]) - 1


def test_http_vqa_without_question_is_400(srv):
    r = httpx.post(srv.url + "/ai/v1/read", timeout=60,
                   json={"model": "pix2struct-tiny", "images": [{"url": data_uri(_image(0))}]})
    assert r.status_code == 400 and "needs a question" in r.json()["message"]
    readers = httpx.get(srv.url + "/ai/v1/models").json()["readers"]
    assert "prompt" in readers["pix2struct-tiny"]["capabilities"]
