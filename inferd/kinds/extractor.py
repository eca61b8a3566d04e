"""Extractors and classifiers (runtimes/extract: GLiNER, token and sequence classifiers;
runtimes/spacy for spaCy pipelines), batched. What a folder can do is read from its files
alone, for /ai/v1/models: zero-shot entities (GLiNER), a manifest's `generator` for
structures. The classifier kind (classifier.py) shares these rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.kinds.spec import KindSpec, batched, folder_of, lazy
from inferd.models import ModelKind

if TYPE_CHECKING:
    from inferd.service.handles import EncoderHandle, EncoderRuntime


def _labels(folder: Path) -> list[str]:
    try:
        return [str(v) for v in (json.loads((folder / "config.json").read_text()).get("id2label") or {}).values()]
    except (OSError, ValueError, AttributeError):
        return []


def extract_capabilities(kind: ModelKind, fmt: str, folder: Path, manifest: dict[str, Any]) -> set[str]:
    """What an extractor or classifier folder can do, from its files alone (for /ai/v1/models)."""
    caps: set[str] = set()
    if kind is ModelKind.EXTRACTOR:
        caps.add("entities")
        if fmt == "onnx" and (folder / "gliner_config.json").is_file():
            caps.add("zero_shot")
    else:
        caps.add("classifications")
        if any(v.lower().startswith("entail") for v in _labels(folder)) and not manifest.get("fixed_labels"):
            caps.add("zero_shot")
    if manifest.get("generator"):
        caps.add("structures")
    return caps


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    return extract_capabilities(ModelKind.EXTRACTOR, fmt, folder_of(path), manifest)


_load = batched(lazy("inferd.runtimes.extract", "load_extractor"))

EXTRACTOR: KindSpec[EncoderHandle[EncoderRuntime]] = KindSpec(
    ModelKind.EXTRACTOR, {"onnx": _load, "spacy": _load}, folder="extractors", formats=("spacy",),
    # a token classifier may also be a chunker: the folder or the pull must say which
    architectures=("TokenClassification",), capabilities=capabilities, pipeline_tags=("token-classification",),
    observe="batch")
