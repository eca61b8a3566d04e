"""Classifiers: ONNX sequence classifiers (runtimes/extract), zero-shot when their labels are
an NLI model's (entailment), batched. Their capabilities follow the extractor's rules."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.kinds.extractor import extract_capabilities
from inferd.kinds.spec import KindSpec, batched, folder_of, lazy
from inferd.models import ModelKind

if TYPE_CHECKING:
    from inferd.service.handles import EncoderHandle, EncoderRuntime


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    return extract_capabilities(ModelKind.CLASSIFIER, fmt, folder_of(path), manifest)


CLASSIFIER: KindSpec[EncoderHandle[EncoderRuntime]] = KindSpec(
    ModelKind.CLASSIFIER, {"onnx": batched(lazy("inferd.runtimes.extract", "load_classifier"))},
    folder="classifiers", capabilities=capabilities, observe="batch")
