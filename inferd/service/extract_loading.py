"""Loaders of extractors and classifiers: build the leaf runtime, attach its dynamic batcher
(inferd/scheduling/batcher.py), return it. Registered in inferd/runtimes/__init__.py LOADERS.

  extractors/<name>/  gliner_config.json + *.onnx      -> GLiNER (zero-shot entities, relations)
                      config.json (TokenClassification) -> token-classifier NER
                      meta.json + config.cfg           -> spaCy pipeline
  classifiers/<name>/ config.json with an 'entailment' label -> zero-shot NLI, else fixed labels
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferd.errors import ModelLoadFailed
from inferd.registry.discovery import onnx_files
from inferd.registry.spec import ModelSpec
from inferd.scheduling.batcher import Batcher


def _opt(settings: Any, name: str, default: Any) -> Any:
    return getattr(settings, name, default) if settings is not None else default


def _threads(settings: Any) -> int | None:
    return _opt(settings, "threads", None) or _opt(settings, "n_threads", None)


def _folder(spec: ModelSpec) -> Path:
    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    p = Path(spec.path)
    return p.parent if p.is_file() else p


def _graph(spec: ModelSpec, settings: Any) -> Path:
    from inferd.runtimes.onnx.files import pick_graph

    folder = _folder(spec)
    if spec.path is not None and Path(spec.path).suffix == ".onnx":
        return Path(spec.path)
    if spec.manifest.get("onnx_file"):
        g = folder / str(spec.manifest["onnx_file"])
        if not g.is_file():
            raise ModelLoadFailed(f"{g}: the manifest's onnx_file does not exist")
        return g
    return pick_graph(onnx_files(folder), spec.manifest, _opt(settings, "prefer_quantized", True))


def _config(folder: Path) -> dict[str, Any]:
    p = folder / "config.json"
    try:
        return json.loads(p.read_text()) if p.is_file() else {}
    except ValueError as e:
        raise ModelLoadFailed(f"{p}: invalid JSON ({e})") from e


def _batched(rt: Any, spec: ModelSpec, settings: Any) -> Any:
    rt.batcher = Batcher(rt.run_batch, max_tokens=int(_opt(settings, "max_batch_tokens", 8192)),
                         max_items=int(_opt(settings, "max_batch_size", 512)), name=spec.name)
    return rt


def _bert(cls: type, spec: ModelSpec, settings: Any) -> Any:
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
    session = OnnxSession(_graph(spec, settings), threads=_threads(settings))
    return _batched(cls(spec.name, session, tokenizer, config, dict(spec.manifest)), spec, settings)


def load_extractor(spec: ModelSpec, settings: Any = None) -> Any:
    folder = _folder(spec)
    if spec.format == "spacy":
        from inferd.runtimes.spacy import SpacyExtractor

        return _batched(SpacyExtractor(folder, spec.name), spec, settings)
    if (folder / "gliner_config.json").is_file():
        from inferd.runtimes.extract import RawSession
        from inferd.runtimes.extract.gliner import GlinerExtractor

        session = RawSession(_graph(spec, settings), threads=_threads(settings))
        return _batched(GlinerExtractor(folder, dict(spec.manifest), session, spec.name), spec, settings)
    from inferd.runtimes.extract.classifiers import TokenClassifierExtractor

    return _bert(TokenClassifierExtractor, spec, settings)


def load_classifier(spec: ModelSpec, settings: Any = None) -> Any:
    from inferd.runtimes.extract.classifiers import SequenceClassifier

    return _bert(SequenceClassifier, spec, settings)
