"""What a served model is, before it is loaded, and the file layout of a model folder.

The neutral base that discovery (inferd/registry), the composition root (inferd/service/
loading.py) and the runtimes (inferd/runtimes) all import; it imports nothing of theirs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

MANIFEST = "model_manifest.json"
TABULAR_FILE = "tabular_model.json"
PREDICTOR_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class ModelKind(str):
    """A model kind, named by its value ("generator"); it equals, hashes and serialises as that
    string. The set is open: the built-in kinds are the constants below, and a new kind is
    named by its own module (`ModelKind("counter")`) with no edit here. What a kind is (its
    folder under models_dir, loaders, capabilities, catalogs) is its KindSpec in inferd/kinds;
    the kinds a server knows are the table inferd.kinds.KINDS. One instance per value, so
    `spec.kind is ModelKind.GENERATOR` holds for every spec of that kind."""

    __slots__ = ()
    _named: ClassVar[dict[str, ModelKind]] = {}

    GENERATOR: ClassVar[ModelKind]
    EMBEDDER: ClassVar[ModelKind]
    RERANKER: ClassVar[ModelKind]
    CHUNKER: ClassVar[ModelKind]
    REWRITER: ClassVar[ModelKind]
    READER: ClassVar[ModelKind]
    TRANSCRIBER: ClassVar[ModelKind]
    EXTRACTOR: ClassVar[ModelKind]
    CLASSIFIER: ClassVar[ModelKind]
    PREDICTOR: ClassVar[ModelKind]
    SPEAKER: ClassVar[ModelKind]

    def __new__(cls, value: str) -> ModelKind:
        known = cls._named.get(value)
        if known is None:
            if not isinstance(value, str) or not _KIND_NAME.fullmatch(value):
                raise ValueError(f"{value!r} is not a kind name (lowercase letters, digits, '_')")
            known = cls._named[value] = super().__new__(cls, value)
        return known

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (the cluster's replicas) as the one instance
        return (ModelKind, (self.value,))

    def __repr__(self) -> str:
        return f"ModelKind({self.value!r})"

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def plural(self) -> str:
        return self.value + "s"


_KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")
ModelKind.GENERATOR = ModelKind("generator")
ModelKind.EMBEDDER = ModelKind("embedder")
ModelKind.RERANKER = ModelKind("reranker")
ModelKind.CHUNKER = ModelKind("chunker")
ModelKind.REWRITER = ModelKind("rewriter")
ModelKind.READER = ModelKind("reader")
ModelKind.TRANSCRIBER = ModelKind("transcriber")
ModelKind.EXTRACTOR = ModelKind("extractor")
ModelKind.CLASSIFIER = ModelKind("classifier")
ModelKind.PREDICTOR = ModelKind("predictor")
ModelKind.SPEAKER = ModelKind("speaker")


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
