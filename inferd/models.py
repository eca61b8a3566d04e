"""What a served model is, before it is loaded, and the file layout of a model folder.

The neutral base that discovery (inferd/registry), the composition root (inferd/service/
loading.py) and the runtimes (inferd/runtimes) all import; it imports nothing of theirs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

MANIFEST = "model_manifest.json"
TABULAR_FILE = "tabular_model.json"
PREDICTOR_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


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
    SPEAKER = "speaker"

    @property
    def plural(self) -> str:
        return self.value + "s"

# What each kind is (its folder under models_dir, loaders, capabilities, catalogs) is its
# module in inferd/kinds; the one table of them is inferd.kinds.KINDS.



@dataclass(frozen=True)
class ModelSpec:
    """A model the server can serve. `path` is a folder or a single file (None only for the
    built-ins that have no file, like the `fixed` chunker)."""

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


# ---- folder layout ---------------------------------------------------------------------------
def model_ggufs(folder: Path) -> list[Path]:
    """The weight files of a GGUF model folder (top level): not projectors; adapters live in loras/."""
    return sorted(p for p in folder.glob("*.gguf") if not p.name.startswith("mmproj"))


def onnx_files(folder: Path) -> list[Path]:
    """ONNX graphs at the top level or in an onnx/ subfolder (the Hugging Face export layout)."""
    return sorted([*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")])


def tabular_file(path: Path) -> Path:
    """The tabular_model.json of a predictor folder (or the file itself)."""
    return path / TABULAR_FILE if path.is_dir() else path
