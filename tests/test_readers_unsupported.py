"""Readers inferd cannot run (Moondream; Florence-2 and Pix2Struct checkpoints without their
ONNX export) are discovered and listed with an "unsupported architecture" reason, and a
request to one is a 400 naming it."""

from __future__ import annotations

import json

import httpx
import pytest

from inferd.cli import main
from tests.server import serve
from tests.vision_helpers import data_uri, render

CONFIGS = {
    "florence-2-base": {"architectures": ["Florence2ForConditionalGeneration"], "model_type": "florence2"},
    "moondream2": {"architectures": ["HfMoondream"], "model_type": "moondream1"},
    "pix2struct-docvqa": {"architectures": ["Pix2StructForConditionalGeneration"], "model_type": "pix2struct"},
}
NAMES = {"florence-2-base": "Florence-2", "moondream2": "Moondream", "pix2struct-docvqa": "Pix2Struct"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for name, cfg in CONFIGS.items():
        d = root / "readers" / name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "model.safetensors").write_bytes(b"\0" * 16)  # never read: no runtime loads it
    return root


def test_listed_with_reason_and_refused_with_400(models):
    with serve(models_dir=str(models)) as s:
        readers = httpx.get(s.url + "/ai/v1/models").json()["readers"]
        assert set(readers) == set(CONFIGS)
        for name, arch in NAMES.items():
            assert readers[name]["capabilities"] == ["unsupported"]
            assert f"unsupported architecture {arch}" in readers[name]["unsupported"]
            r = httpx.post(s.url + "/ai/v1/read", json={"model": name, "images": [{"url": data_uri(render(["x"]))}]})
            assert r.status_code == 400, r.text
            assert r.json()["error"] == "MODEL_NOT_SUPPORTED" and arch in r.json()["message"]
        assert s.service.registry.loaded == {}
        assert s.service.media.held == 0


def test_inferd_models_shows_reason(models, capsys):
    assert main(["models", "--models-dir", str(models), "--no-builtins", "--ml-dir", "/nonexistent"]) == 0
    out = capsys.readouterr().out
    for name, arch in NAMES.items():
        line = next(x for x in out.splitlines() if x.startswith(name))
        assert "reader" in line and f"unsupported architecture {arch}" in line
