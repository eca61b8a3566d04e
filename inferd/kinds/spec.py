"""KindSpec: everything inferd knows about one model kind, in one record (see the package
docstring for how the records are used and how a kind is added).

This module and the kind modules import, at module level, only the neutral base
(inferd.models, inferd.errors): the registry reads the table at discovery, so it must be
cheap and import nothing above it. Runtimes, schedulers and handle classes are imported
inside the loaders, on first load (tests/test_layering.py checks both)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import EncoderHandle, EncoderRuntime

H = TypeVar("H")

# (spec, options) -> a loaded handle; runs on a worker thread of the registry
Loader = Callable[[ModelSpec, "RuntimeOptions"], H]
# (format, path, manifest) -> the capabilities the files show (beyond the manifest's own)
Capabilities = Callable[[str, Path, dict[str, Any]], set[str]]
# (path, manifest) -> the manifest with what discovery reads from the files added
Describe = Callable[[Path, dict[str, Any]], dict[str, Any]]
# a spec -> the extra fields of its Antfly /ai/v1/models entry
CatalogFields = Callable[[ModelSpec], dict[str, Any]]
# a model found under models_dir -> the specs served for it (an embedder's float and -i8 graphs)
Variants = Callable[[ModelSpec], list[ModelSpec]]


@dataclass(frozen=True, eq=False)
class KindSpec(Generic[H]):
    """One kind: how discovery recognises it, how a pull infers it, how it loads (one loader
    per format, returning the kind's handle type H), and what catalogs and the observer say.
    A KindSpec is also a one-kind filter (iterating it yields its kind), so it can be passed
    wherever a list of kinds is, and `Registry.use(name, SPEC)` yields an H."""

    kind: ModelKind
    loaders: Mapping[str, Loader[H]]
    # ---- discovery (registry/discovery.py) ----
    # <models_dir>/<folder>/ holds models of this kind; None: found elsewhere (predictors: ml_dir)
    folder: str | None = None
    formats: tuple[str, ...] = ()        # formats that alone make a file or folder this kind (gguf)
    architectures: tuple[str, ...] = ()  # config.json architecture markers that make it this kind
    describe: Describe | None = None     # manifest fields read from the files (a projector, a family)
    capabilities: Capabilities | None = None
    variants: Variants | None = None     # None: one folder, one served name
    # the format of a folder with a config.json but no weights inferd can read: listed (and
    # refused on load with the manifest's reason) rather than skipped; None: skipped
    unreadable_format: str | None = None
    # ---- pull (registry/pull/hub.py) ----
    pipeline_tags: tuple[str, ...] = ()  # the Hub's pipeline_tag values of this kind
    pull_formats: tuple[str, ...] = ("onnx",)
    # ---- catalogs (api/*/convert.py) and the registry's memory estimate ----
    faces: frozenset[str] = frozenset({"antfly"})  # catalogs that list it: openai, ollama, antfly
    inputs: tuple[str, ...] = ("text",)            # Antfly's `inputs` of its /ai/v1/models entry
    catalog: CatalogFields | None = None
    load_overhead: float = 1.0  # resident size before loading = files x this (a generator's KV cache)
    # ---- observer: which scheduler view /load, /metrics and /slots take of a loaded handle ----
    observe: Literal["engine", "batch"] | None = None
    # ---- routes: the kind's own route modules, "module:attribute" of a FastAPI APIRouter,
    # mounted by create_app (api/app.py) and imported only then (the table stays cheap). The
    # built-in kinds' routes serve several kinds each and are listed in api/app.py's ROUTERS.
    routes: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[ModelKind]:
        yield self.kind

    def handle_of(self, model: object) -> H:
        """The registry's loaded object for a model of this kind, typed: the kind's loaders
        are the only code that builds it."""
        return cast(H, model)


# ---- helpers the kind modules share ----------------------------------------------------------
def lazy(module: str, fn: str) -> Callable[[ModelSpec, "RuntimeOptions"], Any]:
    """A runtime's load function, imported on first load (listing models imports no runtime)."""
    def build(spec: ModelSpec, opts: RuntimeOptions) -> Any:
        import importlib

        return getattr(importlib.import_module(module), fn)(spec, opts)

    return build


def batched(build: Callable[[ModelSpec, "RuntimeOptions"], "EncoderRuntime"]
            ) -> Loader["EncoderHandle[Any]"]:
    """A loader that wraps what `build` returns in a dynamic batcher (the token budget is the
    server's, lowered to the model's own cap when it has one, e.g. sparse logits)."""
    def load(spec: ModelSpec, opts: RuntimeOptions) -> EncoderHandle[Any]:
        from inferd.scheduling.batcher import Batcher
        from inferd.service.handles import EncoderHandle

        enc = build(spec, opts)
        budget = min(opts.max_batch_tokens, enc.max_batch_tokens or opts.max_batch_tokens)
        batcher = Batcher(enc.run_batch, max_tokens=budget, max_items=opts.max_batch_size, name=spec.name)
        return EncoderHandle(enc, batcher, size_bytes=file_size(spec))

    return load


def file_size(spec: ModelSpec) -> int:
    """Resident size of an encoder: about its weights on disk (onnxruntime maps them)."""
    if spec.size_bytes:
        return spec.size_bytes
    if spec.path is None:
        return 0
    p = spec.path
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def folder_of(path: Path) -> Path:
    return path if path.is_dir() else path.parent


def config_of(folder: Path) -> dict[str, Any]:
    """The folder's config.json as a dict; {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads((folder / "config.json").read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def has_file(folder: Path, name: str) -> bool:
    """`name` in the folder or its onnx/ subfolder (where optimum-style exports put graphs)."""
    return (folder / name).is_file() or (folder / "onnx" / name).is_file()


def architectures(folder: Path) -> list[str]:
    """config.json's `architectures` (T5ForConditionalGeneration, ...); [] without one."""
    return list(config_of(folder).get("architectures") or [])


def declared(manifest: dict[str, Any]) -> set[str]:
    """The capabilities a model_manifest.json names itself."""
    return {str(c) for c in manifest.get("capabilities") or []}
