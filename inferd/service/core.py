"""The catalog: the one entry point that turns a served model name into a spec, for every
route; plus discovery at start-up and the list of installed native backends."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from typing import Any

from inferd.config import Settings
from inferd.errors import InvalidInput, ModelNotSupported
from inferd.models import ModelKind, ModelSpec
from inferd.registry.builtins import builtin_specs
from inferd.registry.discovery import Discovery, discover
from inferd.registry.registry import Registry

log = logging.getLogger("inferd.service")

EMBEDDING_TWIN = "@embeddings"  # a generator's embedding twin: `<generator>@embeddings` (no served name has "@")
EMBEDDINGS_OF = "embeddings_of"  # its manifest key: the generator it embeds for (the name it answers with)


def available_backends() -> dict[str, bool]:
    """Which native runtimes are installed (checked without importing them)."""
    def has(m: str) -> bool:
        return importlib.util.find_spec(m) is not None

    return {"llama_cpp": has("llama_cpp"), "onnx": has("onnxruntime"), "ctranslate2": has("ctranslate2"),
            "native": True, "cuda": False, "metal": False, "xla": False, "wasm": False}


def _check_predictor(path: Any) -> dict[str, Any]:
    from inferd.runtimes.tabular import check_file  # numpy only

    return check_file(path)


def discover_all(settings: Settings) -> Discovery:
    found = discover(settings.models_dir, settings.ml_dir, settings.models, check_predictor=_check_predictor,
                     mmproj=settings.mmproj)
    found.specs = found.specs + builtin_specs(found.specs, with_providers=settings.builtins)
    return found


class Catalog:
    """Served names -> specs, with one rule for every route: an unknown name is a 404, a
    model of another kind a 400, and an omitted name means the only model of that kind."""

    def __init__(self, registry: Registry):
        self.registry = registry

    def models(self, *kinds: ModelKind) -> list[ModelSpec]:
        return self.registry.of_kind(*kinds) if kinds else list(self.registry.specs.values())

    def resolve(self, model: str | None, *kinds: ModelKind, default: str | None = None) -> ModelSpec:
        """The served `model`, of one of `kinds` (any kind when none is given). An omitted
        model is `default` when given, else the only model of the kind (the openai-server
        seed serves one model and ignores `model`); with several it must be named."""
        if not model and default is not None:
            model = default
        if not model:
            found = self.registry.of_kind(*kinds) if len(kinds) == 1 else []
            if len(found) == 1:
                return found[0]
            what = kinds[0].plural if len(kinds) == 1 else "models"
            raise InvalidInput(f"'model' is required ({len(found)} {what} are served)", "model")
        return self.registry.resolve(model, kinds or None)

    def resolve_embedder(self, model: str | None) -> ModelSpec:
        """resolve(model, EMBEDDER), plus openai-server's rule (it embeds with its one loaded
        GGUF): where no embedder is configured (built-ins aside), a GGUF generator named as
        `model`, or the only generator when `model` is omitted and no embedder at all is
        served, embeds through llama.cpp's embedding mode (runtimes/gguf_embed.py: pooling from
        the GGUF's metadata, mean when it declares none). An unknown name stays a 404."""
        try:
            return self.resolve(model, ModelKind.EMBEDDER)
        except (InvalidInput, ModelNotSupported):
            gen = self._generator_to_embed(model)
            if gen is None:
                raise
            return self.embedding_twin(gen)

    def _generator_to_embed(self, model: str | None) -> ModelSpec | None:
        embedders = self.registry.of_kind(ModelKind.EMBEDDER)
        if any(s.source != "builtin" for s in embedders):
            return None
        if model:
            spec = self.registry.lookup(model)
        else:
            gens = self.registry.of_kind(ModelKind.GENERATOR)
            spec = gens[0] if len(gens) == 1 and not embedders else None
        return spec if spec is not None and spec.kind is ModelKind.GENERATOR and spec.format == "gguf" else None

    def embedding_twin(self, gen: ModelSpec) -> ModelSpec:
        """The embedder spec of a GGUF generator's file: its own loaded llama.cpp context (in
        embedding mode), held and budgeted like any model, answering with the generator's name."""
        name = gen.name + EMBEDDING_TWIN
        twin = self.registry.twins.get(name)
        if twin is None or twin.path != gen.path:
            twin = dataclasses.replace(gen, name=name, kind=ModelKind.EMBEDDER, capabilities=frozenset({"dense"}),
                                       manifest={**gen.manifest, EMBEDDINGS_OF: gen.name})
            self.registry.twins[name] = twin
        return twin

    def is_loaded(self, name: str) -> bool:
        return name in self.registry.loaded

    def loaded(self) -> list[dict[str, Any]]:
        return self.registry.ps()
