"""Vision encoder-decoder readers (tiny random TrOCR-style and Donut-style fixtures, ONNX in
the optimum layout): image preprocessing equal to the Hugging Face processor, generated
token ids equal to transformers' `generate` (greedy and beam), over HTTP and in the runtime."""

from __future__ import annotations

import json
import shutil

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.runtimes.onnx.image_prep import ImagePrep
from inferd.runtimes.onnx.vision_seq2seq import VisionSeq2Seq, token2json
from inferd.types import ReadItem
from tests.conftest import FIXTURES
from tests.server import serve
from tests.vision_helpers import data_uri

VISION = FIXTURES / "vision"


def _ref(name):
    return json.loads((VISION / name / "reference.json").read_text())


def _image(name, i):
    return Image.open(VISION / name / f"image{i}.png").convert("RGB")


@pytest.mark.parametrize("name", ["trocr-tiny", "donut-tiny", "clip-tiny"])
def test_preprocessing_equals_hf_processor(name):
    prep = ImagePrep.from_file(VISION / name / "preprocessor_config.json")
    ref = np.load(VISION / name / "pixel_values.npy")
    for i in range(len(ref)):
        got = prep(np.asarray(_image(name, i)))
        assert got.shape == ref[i].shape
        assert float(np.abs(got - ref[i]).max()) <= 1e-4


@pytest.mark.parametrize("name", ["trocr-tiny", "donut-tiny"])
def test_runtime_tokens_equal_reference_greedy_and_beam(name):
    rt = VisionSeq2Seq(name, VISION / name, threads=1)
    ref = _ref(name)
    beams = sorted({c["num_beams"] for c in ref["cases"]})
    assert beams[0] == 1 and beams[-1] > 1
    for c in ref["cases"]:
        prompt = rt.tokenizer.decode(c["prompt_ids"], skip_special_tokens=False) if c["prompt_ids"] else None
        out = rt.run_batch([ReadItem(np.asarray(_image(name, c["image"])), prompt, ref["max_new_tokens"])],
                           num_beams=c["num_beams"])[0]
        assert out.tokens == c["tokens"], c


def test_runtime_batches_greedy_rows_like_single_runs():
    rt = VisionSeq2Seq("trocr-tiny", VISION / "trocr-tiny", threads=1)
    ref = [c for c in _ref("trocr-tiny")["cases"] if c["num_beams"] == 1]
    items = [ReadItem(np.asarray(_image("trocr-tiny", c["image"])), None, 12) for c in ref]
    outs = rt.run_batch(items + items[::-1])
    assert [o.tokens for o in outs] == [c["tokens"] for c in ref] + [c["tokens"] for c in ref[::-1]]


def test_token2json_flattens_donut_fields():
    seq = ("<s_menu><s_nm>Coffee</s_nm><s_price>$3.50</s_price><sep/><s_nm>Tea</s_nm></s_menu>"
           "<s_total><s_total_price>$123.45</s_total_price></s_total></s>")
    assert token2json(seq) == {"menu.0.nm": "Coffee", "menu.0.price": "$3.50", "menu.1.nm": "Tea",
                               "total.total_price": "$123.45"}
    assert token2json("<s_answer>42</s_answer>") == {"answer": "42"}
    assert token2json("no markup") == {}


def _copy(dst, name, **gen):
    d = dst / name
    shutil.copytree(VISION / name, d)
    if gen:
        g = json.loads((d / "generation_config.json").read_text())
        g.update(gen)
        (d / "generation_config.json").write_text(json.dumps(g))
    return d


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    readers = models / "readers"
    readers.mkdir()
    _copy(readers, "trocr-tiny")
    _copy(readers, "donut-tiny")
    shutil.copytree(VISION / "trocr-tiny", readers / "trocr-beam")
    g = json.loads((readers / "trocr-beam" / "generation_config.json").read_text())
    (readers / "trocr-beam" / "generation_config.json").write_text(json.dumps({**g, "num_beams": 3,
                                                                               "early_stopping": True}))
    shutil.copytree(VISION / "donut-tiny", readers / "donut-beam")
    g = json.loads((readers / "donut-beam" / "generation_config.json").read_text())
    (readers / "donut-beam" / "generation_config.json").write_text(json.dumps({**g, "num_beams": 2,
                                                                               "early_stopping": True}))
    with serve(models_dir=str(models), threads=1) as s:
        yield s


def _post(srv, body):
    return httpx.post(srv.url + "/ai/v1/read", json=body, timeout=60)


def _expect(name, case):
    """(text of the generated tokens only, generated count, prompt length, max_new_tokens);
    the reference's own `text` decodes the prompt too."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(VISION / name / "tokenizer.json"))
    n_prompt = len(case["prompt_ids"]) if case["prompt_ids"] else 1
    gen = case["tokens"][n_prompt:]
    if not case["prompt_ids"]:
        assert tok.decode(gen, skip_special_tokens=True) == case["text"]
    return tok.decode(gen, skip_special_tokens=True), len(gen), n_prompt, _ref(name)["max_new_tokens"]


@pytest.mark.parametrize("model,ref_name,beams", [("trocr-tiny", "trocr-tiny", 1), ("trocr-beam", "trocr-tiny", 3)])
def test_http_trocr_matches_reference(srv, model, ref_name, beams):
    cases = [c for c in _ref(ref_name)["cases"] if c["num_beams"] == beams]
    body = _post(srv, {"model": model, "max_tokens": 12,
                       "images": [{"url": data_uri(_image(ref_name, c["image"]))} for c in cases]})
    assert body.status_code == 200, body.text
    out = body.json()
    assert out["model"] == model
    for d, c in zip(out["data"], cases):
        text, n_gen, _, _ = _expect(ref_name, c)
        assert d["text"] == text.strip()
        assert "regions" not in d
    gen = sum(_expect(ref_name, c)[1] for c in cases)
    assert out["usage"]["completion_tokens"] == gen and out["usage"]["prompt_tokens"] == len(cases)


@pytest.mark.parametrize("model,beams", [("donut-tiny", 1), ("donut-beam", 2)])
def test_http_donut_task_prompts_match_reference(srv, model, beams):
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(VISION / "donut-tiny" / "tokenizer.json"))
    for c in [c for c in _ref("donut-tiny")["cases"] if c["num_beams"] == beams]:
        prompt = tok.decode(c["prompt_ids"], skip_special_tokens=False)
        assert prompt.startswith(("<s_cord-v2>", "<s_docvqa><s_question>"))
        r = _post(srv, {"model": model, "prompt": prompt, "max_tokens": 12,
                        "images": [{"url": data_uri(_image("donut-tiny", c["image"]))}]})
        assert r.status_code == 200, r.text
        out = r.json()
        text, n_gen, n_prompt, _ = _expect("donut-tiny", c)
        assert out["data"][0]["text"] == text.strip()
        assert out["usage"]["prompt_tokens"] == n_prompt and out["usage"]["completion_tokens"] == n_gen


def test_http_trocr_refuses_prompt_and_bad_max_tokens(srv):
    img = {"url": data_uri(_image("trocr-tiny", 0))}
    r = _post(srv, {"model": "trocr-tiny", "prompt": "What is this?", "images": [img]})
    assert r.status_code == 400 and "takes no prompt" in r.json()["message"]
    r = _post(srv, {"model": "trocr-tiny", "max_tokens": 0, "images": [img]})
    assert r.status_code == 400 and r.json()["error"] == "INVALID_REQUEST"
    r = _post(srv, {"model": "trocr-tiny", "images": []})
    assert r.status_code == 400


def test_catalog_lists_encoder_decoder_readers(srv):
    readers = httpx.get(srv.url + "/ai/v1/models").json()["readers"]
    assert set(readers) == {"trocr-tiny", "trocr-beam", "donut-tiny", "donut-beam"}
    assert "fields" in readers["donut-tiny"]["capabilities"] and readers["trocr-tiny"]["inputs"] == ["image"]


def test_merged_decoder_tokens_equal_reference(tmp_path):
    """optimum's decoder_model_merged.onnx alone (as hub exports ship it): the same tokens."""
    d = tmp_path / "trocr-merged"
    shutil.copytree(VISION / "trocr-tiny", d)
    (d / "decoder_model.onnx").unlink()
    (d / "decoder_with_past_model.onnx").unlink()
    rt = VisionSeq2Seq("trocr-merged", d, threads=1)
    assert rt.merged
    for c in _ref("trocr-tiny")["cases"]:
        out = rt.run_batch([ReadItem(np.asarray(_image("trocr-tiny", c["image"])), None, 12)],
                           num_beams=c["num_beams"])[0]
        assert out.tokens == c["tokens"], c


def test_donut_output_becomes_fields():
    """What Donut generates (its <s_key> tokens are special tokens) -> text without the markup,
    and flattened fields."""
    rt = VisionSeq2Seq("donut-tiny", VISION / "donut-tiny", threads=1)
    cord = rt.prompt_ids("<s_cord-v2>")
    gen = rt.tokenizer.encode("<s_menu><s_nm>coffee</s_nm><sep/><s_nm>tea</s_nm></s_menu>"
                              "<s_total>3.50</s_total></s>", add_special_tokens=False).ids
    assert len(cord) == 1 and rt.tokenizer.token_to_id("<s_total>") in gen
    out = rt._output(cord, gen)
    assert out.fields == {"menu.0.nm": "coffee", "menu.1.nm": "tea", "total": "3.50"}
    assert "<s_" not in out.text and "coffee" in out.text and "3.50" in out.text
    assert out.prompt_tokens == 1 and out.completion_tokens == len(gen)


def test_unpreparable_image_is_400_and_spares_the_batch(srv):
    strip = {"url": data_uri(Image.new("RGB", (3000, 1)))}
    r = _post(srv, {"model": "donut-tiny", "prompt": "<s_cord-v2>", "images": [strip]})
    assert r.status_code == 400 and "cannot be prepared" in r.json()["message"]
    rt = VisionSeq2Seq("donut-tiny", VISION / "donut-tiny", threads=1)
    good = ReadItem(np.asarray(_image("donut-tiny", 0)), "<s_cord-v2>", 12)
    bad = ReadItem(np.zeros((1, 3000, 3), np.uint8), "<s_cord-v2>", 12)
    outs = rt.run_batch([bad, good])
    ref = next(c for c in _ref("donut-tiny")["cases"] if c["num_beams"] == 1 and c["image"] == 0
               and len(c["prompt_ids"]) == 1)
    assert isinstance(outs[0], Exception) and outs[1].tokens == ref["tokens"]
