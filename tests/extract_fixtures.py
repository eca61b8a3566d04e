"""Model folders for the extraction tests: the committed tiny fixtures laid out as
<models_dir>/extractors/, classifiers/ and generators/ (symlinks: nothing is copied but the
small manifests that differ)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ONNX = Path(__file__).parent / "fixtures" / "onnx"
TINY_GGUF = Path(__file__).parent / "fixtures" / "gguf" / "tiny-llama.gguf"


def reference(name: str) -> dict:
    return json.loads((ONNX / name / "reference.json").read_text())


def _link_dir(src: Path, dst: Path, manifest: dict | None = None) -> None:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name in ("reference.json",) or (manifest is not None and f.name == "model_manifest.json"):
            continue
        (dst / f.name).symlink_to(f.resolve())
    if manifest is not None:
        (dst / "model_manifest.json").write_text(json.dumps(manifest))


def models_dir(root: Path) -> Path:
    """extractors/{tiny-gliner, tiny-ner}, classifiers/{tiny-topic, tiny-nli}, generators/tiny;
    tiny-gliner names generators/tiny as its structures generator."""
    _link_dir(ONNX / "tiny-gliner", root / "extractors" / "tiny-gliner",
              {"type": "extractor", "capabilities": ["relations"], "generator": "tiny"})
    _link_dir(ONNX / "tiny-bert-ner", root / "extractors" / "tiny-ner")
    # A manifest that claims more than the runtime can do (relations on a fixed-label NER model).
    _link_dir(ONNX / "tiny-bert-ner", root / "extractors" / "tiny-ner-boastful",
              {"type": "extractor", "capabilities": ["relations"]})
    _link_dir(ONNX / "tiny-bert-topic", root / "classifiers" / "tiny-topic")
    _link_dir(ONNX / "tiny-bert-nli", root / "classifiers" / "tiny-nli")
    g = root / "generators" / "tiny"
    g.mkdir(parents=True)
    shutil.copy(TINY_GGUF, g / "model.gguf")
    (g / "model_manifest.json").write_text(json.dumps({"n_ctx": 4096}))
    return root


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def extract_srv(tmp_path_factory):
    """One server for the extraction tests over the tiny fixtures (1 thread)."""
    from tests.server import serve

    d = models_dir(tmp_path_factory.mktemp("extract-models"))
    with serve(models_dir=str(d), threads=1, parallel=4) as s:
        yield s


def post(srv, body: dict, timeout: float = 60):
    import httpx

    return httpx.post(srv.url + "/ai/v1/extract", json=body, timeout=timeout)
