"""Model kinds: one module per kind, one table.

Each module here holds everything inferd knows about one kind of model, in one `KindSpec`
(spec.py): how discovery recognises a folder under `<models_dir>/<plural>/` (the formats and
config.json architectures that make a model this kind, the manifest fields and capabilities
read from its files), how a pull infers it from the Hub's listing (pipeline tags, the formats
it can be pulled in), its loader per format (the runtime, wrapped in its scheduler, returned
as the kind's typed handle, service/handles.py), and what catalogs and the observer say of it
(which faces list it, its inputs, extra catalog fields, which scheduler view /load shows).

`KINDS` is the one table. Discovery (registry/discovery.py), pull kind inference
(registry/pull/hub.py), the loaders (service/loading.py), the registry's memory estimate,
the catalogs (/v1/models, Ollama tags, Antfly /ai/v1/models) and the observer read it; none
of them has an if-chain over kinds of its own.

Adding a kind touches only its own files (docs/architecture-kinds.md has the long form, with
the toy "counter" kind of tests/test_kinds_toy.py as its example):
  1. its name, in its kind module: `ModelKind("speaker")` (ModelKind is open: no edit of models.py);
  2. a leaf runtime under inferd/runtimes/ (imports only the base) with a load(spec, options);
  3. its handle in service/handles.py (`runtime`, `scheduler`, `size_bytes`, `stats()`,
     `close()`), or reuse EncoderHandle via `batched(...)`;
  4. a module here, `inferd/kinds/<kind>.py`, defining `<KIND>: KindSpec[<Handle>] = KindSpec(...)`
     (loaders per format, folder, formats/architectures, capabilities, pipeline tags, faces,
     and `routes`: its own route modules, mounted by create_app);
  5. one entry in `KINDS` below;
  6. a service verb calling `registry.use(name, <KIND>)`, which yields the typed handle, and
     one route module per API face calling that verb.
Discovery, pulls, loading, catalogs, /load and /metrics then know the kind with no other edit."""

from __future__ import annotations

from inferd.kinds.chunker import CHUNKER
from inferd.kinds.classifier import CLASSIFIER
from inferd.kinds.embedder import EMBEDDER
from inferd.kinds.extractor import EXTRACTOR
from inferd.kinds.generator import GENERATOR
from inferd.kinds.predictor import PREDICTOR
from inferd.kinds.reader import READER
from inferd.kinds.reranker import RERANKER
from inferd.kinds.rewriter import REWRITER
from inferd.kinds.speaker import SPEAKER
from inferd.kinds.spec import KindSpec
from inferd.kinds.transcriber import TRANSCRIBER
from inferd.models import ModelKind

KINDS: dict[ModelKind, KindSpec] = {s.kind: s for s in (
    GENERATOR, EMBEDDER, RERANKER, CHUNKER, REWRITER, READER, TRANSCRIBER, EXTRACTOR, CLASSIFIER, PREDICTOR,
    SPEAKER)}

# An ONNX folder (or repo) nothing else claims is an embedder, the commonest export.
FALLBACK = ModelKind.EMBEDDER


class AmbiguousKind(ValueError):
    """Files that more than one kind claims (a token classifier: chunker or extractor)."""

    def __init__(self, marker: str, kinds: list[ModelKind]):
        self.marker, self.kinds = marker, kinds
        names = " or ".join(f"{'an' if k.value[0] in 'aeiou' else 'a'} {k.value}" for k in kinds)
        super().__init__(f"a {marker} model may be {names}")


def kind_dirs() -> dict[str, ModelKind]:
    """The Antfly layout: <models_dir>/<folder>/<served name>/..."""
    return {s.folder: k for k, s in KINDS.items() if s.folder}


def parse_kind(word: str) -> ModelKind | None:
    """A kind named by its value or its plural ("embedder", "embedders"), else None."""
    w = word.strip().lower()
    return next((k for k in KINDS if k.value == w or k.plural == w or KINDS[k].folder == w), None)


def kind_of_format(fmt: str) -> ModelKind | None:
    """The kind a format alone makes (gguf: generator, tabular: predictor, ...)."""
    return next((k for k, s in KINDS.items() if fmt in s.formats), None)


def kind_of_architecture(arch: str) -> ModelKind | None:
    """The kind whose marker comes first in `arch` (config.json architectures, joined):
    WhisperForConditionalGeneration is Whisper (a transcriber) before it is a conditional
    generator. A marker two kinds claim is AmbiguousKind."""
    hits = sorted((arch.find(m), m) for s in KINDS.values() for m in s.architectures if m in arch)
    if not hits:
        return None
    marker = hits[0][1]
    claim = [k for k, s in KINDS.items() if marker in s.architectures]
    if len(claim) > 1:
        raise AmbiguousKind(marker, claim)
    return claim[0]


def kinds_of_pipeline(tag: str | None) -> list[ModelKind]:
    """The kinds the Hub's pipeline_tag can mean (two for token-classification)."""
    return [k for k, s in KINDS.items() if tag and tag in s.pipeline_tags]


def listed_in(face: str) -> tuple[ModelKind, ...]:
    """The kinds a face's catalog lists ("openai", "ollama", "antfly")."""
    return tuple(k for k, s in KINDS.items() if face in s.faces)


__all__ = ["CHUNKER", "CLASSIFIER", "EMBEDDER", "EXTRACTOR", "FALLBACK", "GENERATOR", "KINDS", "PREDICTOR",
           "READER", "RERANKER", "REWRITER", "SPEAKER", "TRANSCRIBER", "AmbiguousKind", "KindSpec", "kind_dirs",
           "kind_of_architecture", "kind_of_format", "kinds_of_pipeline", "listed_in", "parse_kind"]
