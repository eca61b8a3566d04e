"""Quantized embedders under their `-i8` names, as the spec's catalog shows them: a folder under
models_dir/embedders/ with a float model.onnx and an int8 graph (made here with onnxruntime's
quantize_dynamic from the tiny BERT fixture) is served as `<name>` (the float graph) and
`<name>-i8` (the int8 one), and the two embed alike."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from inferd.registry.discovery import Discovery, scan_models_dir
from tests.server import serve

ONNX = Path(__file__).parent / "fixtures" / "onnx"
REF = json.loads((ONNX / "tiny-bert-embed" / "reference.json").read_text())
TEXTS = REF["sentences"][:3]


def quantized_folder(dest: Path, int8_name: str = "model_quantized.onnx") -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    shutil.copytree(ONNX / "tiny-bert-embed", dest)
    quantize_dynamic(str(dest / "model.onnx"), str(dest / int8_name), weight_type=QuantType.QInt8)
    return dest


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    quantized_folder(root / "embedders" / "tiny")
    return root


def test_discovery_lists_both_graphs(models, tmp_path):
    found = Discovery()
    scan_models_dir(models, found)
    by_name = {s.name: s for s in found.specs}
    assert sorted(by_name) == ["tiny", "tiny-i8"]
    assert by_name["tiny"].manifest["onnx_file"] == "model.onnx"
    assert by_name["tiny-i8"].manifest["onnx_file"] == "model_quantized.onnx"
    assert by_name["tiny-i8"].manifest["quantization"] == "int8"
    # each one's size is its own graph (plus the shared tokenizer and config), not both graphs
    folder = models / "embedders" / "tiny"
    shared = sum(p.stat().st_size for p in folder.iterdir() if p.suffix != ".onnx")
    assert by_name["tiny"].size_bytes == shared + (folder / "model.onnx").stat().st_size
    assert by_name["tiny-i8"].size_bytes == shared + (folder / "model_quantized.onnx").stat().st_size


@pytest.mark.parametrize("int8_name", ["model_int8.onnx", "model.int8.onnx", "onnx/model_quantized.onnx"])
def test_other_int8_file_names(tmp_path, int8_name):
    d = tmp_path / "m" / "embedders" / "e"
    if "/" in int8_name:  # the Hugging Face layout: graphs under onnx/
        shutil.copytree(ONNX / "tiny-bert-embed", d)
        (d / "onnx").mkdir()
        (d / "model.onnx").rename(d / "onnx" / "model.onnx")
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(d / "onnx" / "model.onnx"), str(d / int8_name), weight_type=QuantType.QInt8)
    else:
        quantized_folder(d, int8_name)
    found = Discovery()
    scan_models_dir(tmp_path / "m", found)
    assert {s.name: s.manifest["onnx_file"] for s in found.specs} == {
        "e": "onnx/model.onnx" if "/" in int8_name else "model.onnx", "e-i8": int8_name}


def test_one_name_where_there_is_one_graph_or_the_manifest_chooses(tmp_path, models):
    root = tmp_path / "m"
    shutil.copytree(ONNX / "tiny-bert-embed", root / "embedders" / "float-only")
    pinned = shutil.copytree(models / "embedders" / "tiny", root / "embedders" / "pinned")
    manifest = json.loads((pinned / "model_manifest.json").read_text())
    (pinned / "model_manifest.json").write_text(json.dumps({**manifest, "onnx_file": "model_quantized.onnx"}))
    # a folder of its own called like another folder's variant keeps its name; the variant goes
    shutil.copytree(models / "embedders" / "tiny", root / "embedders" / "both")
    shutil.copytree(ONNX / "tiny-bert-embed", root / "embedders" / "both-i8")
    found = Discovery()
    scan_models_dir(root, found)
    assert sorted(s.name for s in found.specs) == ["both", "both-i8", "float-only", "pinned"]
    assert next(s for s in found.specs if s.name == "both-i8").path == root / "embedders" / "both-i8"
    assert any("both-i8" in p for p in found.problems)


def test_both_names_are_served_and_embed_alike(models):
    with serve(models_dir=str(models)) as s:
        listed = httpx.get(s.url + "/ai/v1/models").json()["embedders"]
        assert {"tiny", "tiny-i8"} <= set(listed)
        vecs = {}
        for name in ("tiny", "tiny-i8"):
            r = httpx.post(s.url + "/v1/embeddings", json={"model": name, "input": TEXTS}, timeout=60)
            assert r.status_code == 200, r.text
            vecs[name] = np.array([d["embedding"] for d in r.json()["data"]])
        graphs = {n: s.service.registry.loaded[n].model.runtime.graph_path for n in ("tiny", "tiny-i8")}
    assert graphs["tiny"].endswith("/model.onnx") and graphs["tiny-i8"].endswith("/model_quantized.onnx")
    a, b = vecs["tiny"], vecs["tiny-i8"]
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert np.all(cos > 0.98), cos
    assert not np.allclose(a, b, atol=1e-6)  # two graphs, not one loaded twice
    # the float name is the float graph: it gives the fixture's reference vectors
    np.testing.assert_allclose(a, np.array(REF["mean"][:3]), atol=1e-4)


def test_model_given_by_hand_gets_its_i8_name_too(models, tmp_path):
    from inferd.registry.discovery import discover

    folder = models / "embedders" / "tiny"
    found = discover(tmp_path / "none", tmp_path / "none", [f"embedder:mine={folder}"])
    by_name = {s.name: s for s in found.specs}
    assert sorted(by_name) == ["mine", "mine-i8"]
    assert by_name["mine"].manifest["onnx_file"] == "model.onnx" and by_name["mine"].source == "cli"
    assert by_name["mine-i8"].manifest["onnx_file"] == "model_quantized.onnx"
    assert by_name["mine-i8"].manifest["variant_of"] == "mine"
    # beside a models_dir folder already called `mine-i8`, that folder keeps the name
    root = tmp_path / "m"
    shutil.copytree(ONNX / "tiny-bert-embed", root / "embedders" / "mine-i8")
    found = discover(root, tmp_path / "none", [f"mine={folder}"])
    assert sorted(s.name for s in found.specs) == ["mine", "mine-i8"]
    assert next(s for s in found.specs if s.name == "mine-i8").path == root / "embedders" / "mine-i8"
    assert any("mine-i8" in p for p in found.problems)


def test_model_given_by_hand_serves_both_graphs(models):
    with serve(models=[f"embedder:hand={models / 'embedders' / 'tiny'}"]) as s:
        assert {"hand", "hand-i8"} <= set(httpx.get(s.url + "/ai/v1/models").json()["embedders"])
        vecs = {}
        for name in ("hand", "hand-i8"):
            r = httpx.post(s.url + "/v1/embeddings", json={"model": name, "input": TEXTS}, timeout=60)
            assert r.status_code == 200, r.text
            vecs[name] = np.array([d["embedding"] for d in r.json()["data"]])
            assert s.service.registry.loaded[name].model.runtime.graph_path.endswith(
                "/model.onnx" if name == "hand" else "/model_quantized.onnx")
    np.testing.assert_allclose(vecs["hand"], np.array(REF["mean"][:3]), atol=1e-4)
    assert not np.allclose(vecs["hand"], vecs["hand-i8"], atol=1e-6)


def test_pulled_model_is_registered_under_both_names(models, tmp_path):
    from inferd.models import ModelKind
    from inferd.registry.pull.puller import Pulled

    root = tmp_path / "m"
    (root / "embedders").mkdir(parents=True)
    with serve(models_dir=str(root)) as s:
        # register() is what a finished pull runs, once the files are in the server's models_dir
        shutil.copytree(models / "embedders" / "tiny", root / "embedders" / "acme" / "pulled")
        spec = s.call(s.service.models_mgr.register(Pulled("acme/pulled", root / "embedders" / "acme" / "pulled",
                                                           ModelKind.EMBEDDER)))
        assert spec.name == "acme/pulled" and spec.manifest["onnx_file"] == "model.onnx"
        listed = httpx.get(s.url + "/ai/v1/models").json()["embedders"]
        assert {"acme/pulled", "acme/pulled-i8"} <= set(listed)
        r = httpx.post(s.url + "/v1/embeddings", json={"model": "acme/pulled-i8", "input": TEXTS}, timeout=60)
        assert r.status_code == 200, r.text
        assert s.service.registry.loaded["acme/pulled-i8"].model.runtime.graph_path.endswith("/model_quantized.onnx")


def test_a_model_given_by_hand_keeps_its_name_over_a_variant(models, tmp_path):
    from inferd.registry.discovery import discover

    folder = models / "embedders" / "tiny"
    found = discover(tmp_path / "none", tmp_path / "none", [f"embedder:a={folder}", f"embedder:a-i8={ONNX / 'tiny-bert-embed'}"])
    assert sorted(s.name for s in found.specs) == ["a", "a-i8"]
    assert next(s for s in found.specs if s.name == "a-i8").path == ONNX / "tiny-bert-embed"
    assert any("'a-i8'" in p for p in found.problems)
