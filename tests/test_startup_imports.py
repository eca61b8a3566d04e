"""Cold start (issue 31): the server listens before any native runtime is imported. Each kind's
runtime (llama.cpp, onnxruntime, CTranslate2, PyAV, ...) loads on the first use of a model of
that kind, and the start-up log's machine summary, which imports them to name their builds,
runs once the socket listens. Checked in a fresh interpreter: what `inferd serve` has imported
when its app is built, with every built-in model discovered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from inferd.runtimes.llama_cpp import selfcheck

NATIVE = ("llama_cpp", "onnxruntime", "ctranslate2", "faster_whisper", "av", "tokenizers", "PIL", "spacy",
          "rapidocr", "cv2", "httpx")

BUILD_APP = f"""
import json, sys
from inferd.cli import build_parser
from inferd.cli_api import settings_from
from inferd.api.app import create_app
from inferd.service import InferenceService

settings = settings_from(build_parser().parse_args(["serve"]))
service = InferenceService.from_settings(settings)
app = create_app(settings, service)
print(json.dumps({{"models": sorted(service.registry.specs),
                  "imported": [m for m in {NATIVE!r} if m in sys.modules]}}))
"""


def test_building_the_served_app_imports_no_native_runtime(tmp_path):
    env = {**os.environ, "INFERD_MODELS_DIR": str(tmp_path / "models"), "INFERD_ML_DIR": str(tmp_path / "ml"),
           "INFERD_DATA_DIR": str(tmp_path / "data")}
    r = subprocess.run([sys.executable, "-c", BUILD_APP], env=env, capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # the built-ins were discovered (the generator among them), and nothing native came with them
    assert "gemma-3-270m" in out["models"] and "all-MiniLM-L6-v2" in out["models"], out["models"]
    assert out["imported"] == [], out["imported"]


def test_the_quantization_type_comes_from_the_header_and_agrees_with_llama_cpp():
    """selfcheck.file_type reads `general.file_type` from the GGUF header in Python (no second,
    vocabulary-only llama.cpp load before the real one); llama.cpp's own reading agrees."""
    files = [Path(f"tests/fixtures/gguf/quant/tiny-{q}.gguf") for q in ("q4_0", "q4_1", "q8_0", "q4_k")]
    assert [selfcheck.file_type(f) for f in files] == ["Q4_0", "Q4_1", "Q8_0", "Q4_K_M"]
    assert [selfcheck._file_type_by_llama(f) for f in files] == ["Q4_0", "Q4_1", "Q8_0", "Q4_K_M"]
    assert selfcheck._header_value(files[0], b"general.architecture") == "llama"
    assert selfcheck._header_value(files[0], b"no.such.key") is None


def test_a_header_without_the_type_still_goes_through_llama_cpp(tmp_path):
    """Hand-made GGUFs carry no general.file_type: llama.cpp's own reading decides, as before (a
    model is its own type by name and size; a file llama.cpp cannot read is 'unknown')."""
    tiny = Path("tests/fixtures/gguf/tiny-llama.gguf")
    assert selfcheck.file_type(tiny) == f"file:tiny-llama.gguf:{tiny.stat().st_size}"
    assert selfcheck.file_type(Path("tests/fixtures/gguf/tiny-lora.gguf")) == "unknown"  # an adapter, no model
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(Path("tests/fixtures/gguf/quant/tiny-q8_0.gguf").read_bytes()[:40])
    assert selfcheck.file_type(cut) == "unknown"
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert selfcheck.file_type(empty) == "unknown"
