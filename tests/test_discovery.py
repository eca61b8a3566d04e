import json
from pathlib import Path

import pytest

from inferd.errors import ConfigError
from inferd.registry.discovery import discover, parse_model_arg
from inferd.registry.registry import Registry
from inferd.models import ModelKind


def touch(p: Path, data: bytes = b"x") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


@pytest.fixture
def layout(tmp_path):
    m = tmp_path / "models"
    touch(m / "generators" / "tiny" / "model.gguf", b"g" * 10)
    touch(m / "generators" / "tiny" / "loras" / "style.gguf")
    touch(m / "generators" / "tiny" / "mmproj-f16.gguf")
    touch(m / "generators" / "loose.gguf")
    touch(m / "embedders" / "BAAI" / "bge-small-en-v1.5" / "model.onnx", b"e" * 7)
    touch(m / "embedders" / "BAAI" / "bge-small-en-v1.5" / "tokenizer.json")
    touch(m / "embedders" / "splade" / "model.onnx")
    touch(m / "embedders" / "splade" / "config.json", json.dumps({"architectures": ["BertForMaskedLM"]}).encode())
    touch(m / "rerankers" / "colbert" / "onnx" / "model.onnx")
    touch(m / "rerankers" / "colbert" / "model_manifest.json",
          json.dumps({"capabilities": ["late_interaction"], "name": "my-colbert"}).encode())
    touch(m / "embedders" / "empty-folder" / "README.md")
    touch(m / "transcribers" / "whisper" / "model.bin")
    touch(m / "transcribers" / "whisper" / "config.json", b"{}")
    ml = tmp_path / "ml"
    # discovery validates the IR (inferd/runtimes/tabular/ir.py): churn must be a real model
    touch(ml / "churn" / "tabular_model.json", json.dumps({
        "schema_version": 1, "metadata": {"task": "regression", "num_features": 1},
        "output": {"activation": "identity", "num_outputs": 1},
        "pipeline": [{"type": "linear", "linear": {"weights": [[2.0]], "biases": [1.0]}}]}).encode())
    touch(ml / "bad name" / "tabular_model.json", b"{}")
    touch(ml / "nofile" / "x.txt")
    return m, ml


def test_antfly_layout(layout):
    m, ml = layout
    found = discover(m, ml, [])
    by = {s.name: s for s in found.specs}
    assert set(by) == {"tiny", "loose", "BAAI/bge-small-en-v1.5", "splade", "my-colbert", "whisper", "churn"}
    assert by["tiny"].kind is ModelKind.GENERATOR and by["tiny"].format == "gguf"
    assert {"lora", "vision", "chat"} <= by["tiny"].capabilities
    assert by["BAAI/bge-small-en-v1.5"].kind is ModelKind.EMBEDDER
    assert by["BAAI/bge-small-en-v1.5"].size_bytes == 8
    assert "sparse" in by["splade"].capabilities and "dense" not in by["splade"].capabilities
    assert by["my-colbert"].kind is ModelKind.RERANKER and "late_interaction" in by["my-colbert"].capabilities
    assert by["whisper"].format == "ctranslate2" and by["whisper"].kind is ModelKind.TRANSCRIBER
    assert by["churn"].kind is ModelKind.PREDICTOR and by["churn"].format == "tabular"
    problems = "\n".join(found.problems)
    assert "bad name" in problems and "nofile" in problems


def test_model_args(layout, tmp_path):
    m, _ = layout
    gguf = m / "generators" / "tiny" / "model.gguf"
    found = discover(tmp_path / "none", tmp_path / "none", [f"chat={gguf}", f"embedder:e1={gguf}",
                                                              f"llama3:8b={gguf}"])
    by = {s.name: s for s in found.specs}
    assert by["chat"].kind is ModelKind.GENERATOR and by["chat"].source == "cli"
    assert by["e1"].kind is ModelKind.EMBEDDER
    assert by["llama3:8b"].kind is ModelKind.GENERATOR  # 'llama3' is not a kind: the colon is part of the name


def test_bad_model_args(tmp_path):
    with pytest.raises(ConfigError, match="NAME=PATH"):
        parse_model_arg("nopath")
    with pytest.raises(ConfigError, match="no such file"):
        discover(tmp_path, tmp_path, [f"x={tmp_path / 'missing.gguf'}"])


def test_duplicate_served_name_is_an_error(layout):
    m, ml = layout
    gguf = m / "generators" / "tiny" / "model.gguf"
    found = discover(m, ml, [f"tiny={gguf}"])
    with pytest.raises(ConfigError, match="duplicate served model name 'tiny'"):
        Registry.build(found.specs, lambda s: None)
