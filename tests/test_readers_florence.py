"""Florence-2 readers (a tiny Florence2ForConditionalGeneration, trained to read one drawn
page, exported in onnx-community's ONNX layout by scripts/make_tiny_readers.py): image
preprocessing equal to the processor's, token ids equal to transformers' `generate` (greedy
and 3 beams) for every task, regions equal to `post_process_generation`, over HTTP too;
unknown tasks and Florence folders without the export are 400s."""

from __future__ import annotations

import json
import shutil

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.errors import InvalidInput
from inferd.runtimes.onnx.florence2 import Florence2Reader
from inferd.runtimes.onnx.florence_tasks import dequantize, parse, task_of
from inferd.types import ReadItem
from tests.conftest import FIXTURES
from tests.server import serve
from tests.vision_helpers import data_uri

FLO = FIXTURES / "readers" / "florence2-tiny"
REF = json.loads((FLO / "reference.json").read_text())


def _image(i):
    return Image.open(FLO / f"image{i}.png").convert("RGB")


def _task_key(prompt):
    return prompt[:prompt.index(">") + 1]


@pytest.fixture(scope="module")
def rt():
    return Florence2Reader("florence2-tiny", FLO, threads=1)


def test_preprocessing_equals_hf_processor(rt):
    ref = np.load(FLO / "pixel_values.npy")
    for i in range(len(ref)):
        got = rt.prep(np.asarray(_image(i)))
        assert got.shape == ref[i].shape == (3, 64, 64)
        assert float(np.abs(got - ref[i]).max()) <= 1e-4


def test_encoder_prompt_equals_processor_text_ids(rt):
    for c in REF["cases"]:
        assert rt.text_ids(task_of(c["prompt"])) == c["text_ids"]


def test_tokens_equal_reference_greedy_and_beam(rt):
    assert {c["num_beams"] for c in REF["cases"]} == {1, 3} and rt.gen.num_beams == 3
    for c in REF["cases"]:
        out = rt.run_batch([ReadItem(np.asarray(_image(c["image"])), c["prompt"], REF["max_new_tokens"])],
                           num_beams=c["num_beams"])[0]
        assert out.tokens == c["tokens"], c["prompt"]
        assert out.completion_tokens == len(c["tokens"]) - 1 and out.prompt_tokens == len(c["text_ids"])


def test_generation_config_beams_are_the_default(rt):
    c = next(c for c in REF["cases"] if c["num_beams"] == 3 and c["image"] == 1 and c["prompt"] == "<CAPTION>")
    out = rt.run_batch([ReadItem(np.asarray(_image(1)), "<CAPTION>", REF["max_new_tokens"])])[0]
    assert out.tokens == c["tokens"]


def test_batch_of_mixed_tasks_equals_single_runs(rt):
    cases = [c for c in REF["cases"] if c["num_beams"] == 1]
    items = [ReadItem(np.asarray(_image(c["image"])), c["prompt"], REF["max_new_tokens"]) for c in cases]
    outs = rt.run_batch(items, num_beams=1)
    assert [o.tokens for o in outs] == [c["tokens"] for c in cases]


def test_merged_decoder_tokens_equal_reference(tmp_path):
    """decoder_model_merged.onnx alone, as onnx-community's exports ship it: the same tokens."""
    d = tmp_path / "florence-merged"
    shutil.copytree(FLO, d)
    (d / "decoder_model.onnx").unlink()
    (d / "decoder_with_past_model.onnx").unlink()
    merged = Florence2Reader("florence-merged", d, threads=1)
    assert merged.merged
    for c in [c for c in REF["cases"] if c["image"] == 0]:
        out = merged.run_batch([ReadItem(np.asarray(_image(0)), c["prompt"], REF["max_new_tokens"])],
                               num_beams=c["num_beams"])[0]
        assert out.tokens == c["tokens"], c["prompt"]


def _expected(c):
    """The processor's post_process_generation answer as inferd's regions: (text, bbox, points, label)."""
    post = c["post"][_task_key(c["prompt"])]
    if "quad_boxes" in post:
        return [(t, [min(q[0::2]), min(q[1::2]), max(q[0::2]), max(q[1::2])], q, None)
                for t, q in zip(post["labels"], post["quad_boxes"])]
    return [(t, b, None, t) for t, b in zip(post["labels"], post["bboxes"])]


def test_parsed_regions_equal_post_process_generation(rt):
    regional = [c for c in REF["cases"] if not isinstance(c["post"][_task_key(c["prompt"])], str)]
    assert {_task_key(c["prompt"]) for c in regional} == {"<OCR_WITH_REGION>", "<OD>", "<CAPTION_TO_PHRASE_GROUNDING>"}
    for c in regional:
        p = parse(task_of(c["prompt"]), c["raw"], _image(c["image"]).size)
        got = [(r["text"], r["bbox"], r.get("quad"), r.get("label")) for r in p.regions]
        assert got == _expected(c), c["prompt"]
    ocr = next(c for c in regional if c["prompt"] == "<OCR_WITH_REGION>" and c["image"] == 0)
    assert [r[0] for r in _expected(ocr)] == ["INVOICE 42", "TOTAL 7"]  # the trained answer: not vacuous


def test_pure_text_equals_post_process_generation():
    for c in REF["cases"]:
        post = c["post"][_task_key(c["prompt"])]
        if isinstance(post, str):
            assert parse(task_of(c["prompt"]), c["raw"], (96, 64)).text == post


def test_dequantize_is_the_bin_centre():
    assert dequantize([0, 0, 999, 999], (1000, 500)) == [0, 0, 999, 499]
    assert dequantize([62, 94], (96, 64)) == [6, 6]


def test_task_prompts_and_refusals():
    assert task_of(None).prompt == "What is the text in the image?"
    assert task_of("<OD>").kind == "description_with_bboxes"
    assert task_of("<CAPTION_TO_PHRASE_GROUNDING> a red car").prompt == "Locate the phrases in the caption: a red car"
    assert task_of("What is on the page?").prompt == "What is on the page?"
    for bad in ("<SUMMARIZE>", "<OCR> and more", "<REGION_TO_OCR>"):
        with pytest.raises(InvalidInput):
            task_of(bad)


def test_prompt_longer_than_the_positions_is_400(rt):
    img = np.asarray(_image(0))
    rt.check(ReadItem(img, "<CAPTION_TO_PHRASE_GROUNDING> box", 12))
    assert rt.image_tokens == 65 and rt.max_positions == 128
    with pytest.raises(InvalidInput, match="at most 128"):
        rt.check(ReadItem(img, "<CAPTION_TO_PHRASE_GROUNDING> " + "box " * 80, 12))


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    shutil.copytree(FLO, models / "readers" / "florence2-tiny")
    bare = models / "readers" / "florence-2-base"   # the PyTorch checkpoint alone: no ONNX export
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"architectures": ["Florence2ForConditionalGeneration"],
                                                  "model_type": "florence2"}))
    (bare / "model.safetensors").write_bytes(b"\0" * 16)
    moon = models / "readers" / "moondream2"
    moon.mkdir()
    (moon / "config.json").write_text(json.dumps({"architectures": ["HfMoondream"], "model_type": "moondream1"}))
    (moon / "model.safetensors").write_bytes(b"\0" * 16)  # never read: it is refused first
    with serve(models_dir=str(models), threads=1) as s:
        yield s


def _read(srv, prompt, image=0, model="florence2-tiny", **kw):
    body = {"model": model, "images": [{"url": data_uri(_image(image))}], "max_tokens": REF["max_new_tokens"], **kw}
    if prompt is not None:
        body["prompt"] = prompt
    return httpx.post(srv.url + "/ai/v1/read", json=body, timeout=120)


def test_http_ocr_text_and_default_task(srv):
    c = next(c for c in REF["cases"] if c["prompt"] == "<OCR>" and c["image"] == 0 and c["num_beams"] == 3)
    for prompt in ("<OCR>", None):
        r = _read(srv, prompt)
        assert r.status_code == 200, r.text
        d = r.json()["data"][0]
        assert d["text"] == c["post"]["<OCR>"] == "INVOICE 42 TOTAL 7"
        assert "regions" not in d
        assert r.json()["usage"]["completion_tokens"] == len(c["tokens"]) - 1


@pytest.mark.parametrize("prompt", ["<OCR_WITH_REGION>", "<OD>", "<CAPTION_TO_PHRASE_GROUNDING>box"])
def test_http_region_tasks_return_regions(srv, prompt):
    c = next(c for c in REF["cases"] if c["prompt"] == prompt and c["image"] == 0 and c["num_beams"] == 3)
    r = _read(srv, prompt)
    assert r.status_code == 200, r.text
    d = r.json()["data"][0]
    got = [(g["text"], g["bbox"], g.get("points"), g.get("label")) for g in d["regions"]]
    assert got == _expected(c)
    assert all(g["confidence"] == 1.0 for g in d["regions"])
    assert d["text"] == "\n".join(x[0] for x in _expected(c))


def test_http_two_images_one_request_scale_to_their_own_size(srv):
    """One batch, two sizes (96x64 and 70x40): each answer's boxes are in its own pixels."""
    cases = [next(c for c in REF["cases"] if c["prompt"] == "<OD>" and c["image"] == i and c["num_beams"] == 3)
             for i in (0, 1)]
    r = httpx.post(srv.url + "/ai/v1/read", timeout=120,
                   json={"model": "florence2-tiny", "prompt": "<OD>", "max_tokens": REF["max_new_tokens"],
                         "images": [{"url": data_uri(_image(i))} for i in (0, 1)]})
    assert r.status_code == 200, r.text
    for d, c in zip(r.json()["data"], cases):
        got = [(g["text"], g["bbox"], g.get("points"), g.get("label")) for g in d.get("regions", [])]
        assert got == _expected(c)
    assert r.json()["usage"]["completion_tokens"] == sum(len(c["tokens"]) - 1 for c in cases)


def test_http_unsupported_task_is_400(srv):
    for prompt in ("<SUMMARIZE>", "<OCR> please"):
        r = _read(srv, prompt)
        assert r.status_code == 400, r.text
        assert r.json()["error"] == "INVALID_REQUEST" and "task" in r.json()["message"]


def test_http_florence_without_export_and_moondream_are_refused(srv):
    readers = httpx.get(srv.url + "/ai/v1/models").json()["readers"]
    assert "regions" in readers["florence2-tiny"]["capabilities"]
    assert "vision_encoder.onnx" in readers["florence-2-base"]["unsupported"]
    for name, words in (("florence-2-base", "embed_tokens.onnx"), ("moondream2", "trust_remote_code")):
        r = _read(srv, None, model=name)
        assert r.status_code == 400, r.text
        assert r.json()["error"] == "MODEL_NOT_SUPPORTED" and words in r.json()["message"]
