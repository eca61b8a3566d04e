"""What a served model is, before it is loaded."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class ModelKind(str, Enum):
    GENERATOR = "generator"
    EMBEDDER = "embedder"
    RERANKER = "reranker"
    CHUNKER = "chunker"
    REWRITER = "rewriter"
    READER = "reader"
    TRANSCRIBER = "transcriber"
    EXTRACTOR = "extractor"
    CLASSIFIER = "classifier"
    PREDICTOR = "predictor"

    @property
    def plural(self) -> str:
        return self.value + "s"


# Antfly layout: <models_dir>/<plural kind>/<served name>/...
KIND_DIRS: dict[str, ModelKind] = {k.plural: k for k in ModelKind if k is not ModelKind.PREDICTOR}


@dataclass(frozen=True)
class ModelSpec:
    """A model the server can serve. `path` is a folder or a single file (None for built-ins)."""

    name: str
    kind: ModelKind
    format: str                       # gguf | onnx | ctranslate2 | tabular | spacy | builtin
    path: Path | None
    source: str                       # models_dir | ml_dir | cli | builtin
    size_bytes: int = 0
    capabilities: frozenset[str] = frozenset()
    manifest: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def family(self) -> str:
        return str(self.manifest.get("family") or self.manifest.get("architecture") or self.format)
