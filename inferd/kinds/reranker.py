"""Rerankers: ONNX cross-encoders (a sequence classifier scoring query + document) or
late-interaction models (ColBERT) declared by their manifest (runtimes/onnx), batched."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.kinds.spec import KindSpec, batched, declared, lazy
from inferd.models import ModelKind

if TYPE_CHECKING:
    from inferd.service.handles import EncoderHandle, RerankerRuntime


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    return set() if declared(manifest) & {"late_interaction", "colbert"} else {"cross_encoder"}


RERANKER: KindSpec[EncoderHandle[RerankerRuntime]] = KindSpec(
    ModelKind.RERANKER, {"onnx": batched(lazy("inferd.runtimes.onnx", "load_reranker"))}, folder="rerankers",
    architectures=("SequenceClassification",), capabilities=capabilities,
    pipeline_tags=("text-classification", "text-ranking"), faces=frozenset({"openai", "antfly"}), observe="batch")
