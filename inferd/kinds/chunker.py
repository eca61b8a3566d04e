"""Chunkers: ONNX token classifiers that mark sentence and section boundaries
(runtimes/onnx), batched; the built-in `fixed` chunker (registry/builtins.py) has no weights."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.kinds.spec import KindSpec, batched, lazy
from inferd.models import ModelKind

if TYPE_CHECKING:
    from inferd.service.handles import ChunkerRuntime, EncoderHandle

CHUNKER: KindSpec[EncoderHandle[ChunkerRuntime]] = KindSpec(
    ModelKind.CHUNKER, {"onnx": batched(lazy("inferd.runtimes.onnx", "load_chunker"))}, folder="chunkers",
    # a token classifier may also be an extractor: the folder or the pull must say which
    architectures=("TokenClassification",), pipeline_tags=("token-classification",), observe="batch")
