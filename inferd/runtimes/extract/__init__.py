"""Extraction runtimes (leaves): GLiNER span models (gliner.py), ONNX token and sequence
classifiers (classifiers.py). spaCy pipelines live in inferd/runtimes/spacy. The loaders below build a
bare runtime; the composition root (inferd/service/loading.py) gives it its batcher."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferd.errors import ModelLoadFailed
from inferd.models import ModelSpec, onnx_files
from inferd.runtimes.options import RuntimeOptions


class RawSession:
    """An onnxruntime session fed by name (GLiNER's graph takes more than ids and masks)."""

    def __init__(self, path: Path, threads: int | None = None):
        from inferd.runtimes.onnx.session import open_session

        self.sess = open_session(path, threads)
        self.inputs = {i.name for i in self.sess.get_inputs()}

    def run(self, outputs: list[str], feed: dict[str, Any]) -> list[Any]:
        return self.sess.run(outputs, {k: v for k, v in feed.items() if k in self.inputs})


# ---- loaders (the composition root, inferd/service/loading.py, wraps each in a batcher) --------
def _folder(spec: ModelSpec) -> Path:
    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    p = Path(spec.path)
    return p.parent if p.is_file() else p


def _graph(spec: ModelSpec, opts: RuntimeOptions) -> Path:
    from inferd.runtimes.onnx.files import pick_graph

    folder = _folder(spec)
    if spec.path is not None and Path(spec.path).suffix == ".onnx":
        return Path(spec.path)
    if spec.manifest.get("onnx_file"):
        g = folder / str(spec.manifest["onnx_file"])
        if not g.is_file():
            raise ModelLoadFailed(f"{g}: the manifest's onnx_file does not exist")
        return g
    return pick_graph(onnx_files(folder), spec.manifest, opts.prefer_quantized)


def _config(folder: Path) -> dict[str, Any]:
    p = folder / "config.json"
    try:
        return json.loads(p.read_text()) if p.is_file() else {}
    except ValueError as e:
        raise ModelLoadFailed(f"{p}: invalid JSON ({e})") from e


def _bert(cls: type, spec: ModelSpec, opts: RuntimeOptions) -> Any:
    from inferd.runtimes.onnx.files import ModelFiles, max_length
    from inferd.runtimes.onnx.session import OnnxSession
    from inferd.runtimes.onnx.tokenize import TextTokenizer

    folder = _folder(spec)
    tok = folder / str(spec.manifest.get("tokenizer", "tokenizer.json"))
    if not tok.is_file():
        raise ModelLoadFailed(f"{folder}: no tokenizer.json")
    config = _config(folder)
    tokenizer = TextTokenizer(str(tok))
    files = ModelFiles(graph=None, tokenizer=tok, folder=folder, config=config, manifest=dict(spec.manifest))
    tokenizer.set_max_length(max_length(files, tokenizer.file_max_length))
    session = OnnxSession(_graph(spec, opts), threads=opts.threads)
    return cls(spec.name, session, tokenizer, config, dict(spec.manifest))


def load_extractor(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions()) -> Any:
    """extractors/<name>/: GLiNER (gliner_config.json + ONNX), a token classifier (ONNX), or a
    spaCy pipeline (meta.json + config.cfg)."""
    folder = _folder(spec)
    if spec.format == "spacy":
        from inferd.runtimes.spacy import SpacyExtractor

        return SpacyExtractor(folder, spec.name)
    if (folder / "gliner_config.json").is_file():
        from inferd.runtimes.extract.gliner import GlinerExtractor

        return GlinerExtractor(folder, dict(spec.manifest), RawSession(_graph(spec, opts), opts.threads), spec.name)
    from inferd.runtimes.extract.classifiers import TokenClassifierExtractor

    return _bert(TokenClassifierExtractor, spec, opts)


def load_classifier(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions()) -> Any:
    """classifiers/<name>/: a sequence classifier (ONNX); zero-shot when its labels include entailment."""
    from inferd.runtimes.extract.classifiers import SequenceClassifier

    return _bert(SequenceClassifier, spec, opts)
