"""The core of the service: settings, registry, admission, metrics and the model catalog."""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from inferd.config import Settings
from inferd.errors import InvalidInput
from inferd.metrics import Metrics
from inferd.registry.builtins import builtin_specs
from inferd.registry.discovery import Discovery, discover
from inferd.registry.registry import Registry
from inferd.registry.spec import ModelKind, ModelSpec
from inferd.runtimes import loader_for
from inferd.scheduling.admission import Admission

log = logging.getLogger("inferd.service")


def available_backends() -> dict[str, bool]:
    """Which native runtimes are installed (checked without importing them)."""
    has = lambda m: importlib.util.find_spec(m) is not None  # noqa: E731
    return {"llama_cpp": has("llama_cpp"), "onnx": has("onnxruntime"), "ctranslate2": has("ctranslate2"),
            "native": True, "cuda": False, "metal": False}


def discover_all(settings: Settings) -> Discovery:
    found = discover(settings.models_dir, settings.ml_dir, settings.models)
    found.specs = found.specs + builtin_specs(found.specs, with_providers=settings.builtins)
    return found


@dataclass
class CoreService:
    """State shared by every verb; the verbs themselves live in mixins (service/__init__.py)."""

    settings: Settings
    registry: Registry
    admission: Admission
    problems: list[str] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)
    backends: dict[str, bool] = field(default_factory=available_backends)
    started_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        """Mixins set up their own state in InferenceService.__post_init__."""

    @classmethod
    def from_settings(cls, settings: Settings):
        found = discover_all(settings)
        registry = Registry.build(found.specs, loader_for, keep_alive=settings.keep_alive,
                                  max_loaded=settings.max_loaded_models)
        admission = Admission(settings.max_concurrent_requests, settings.max_queued_requests,
                              settings.queue_timeout)
        return cls(settings=settings, registry=registry, admission=admission, problems=found.problems)

    async def start(self) -> None:
        self.registry.start()

    async def close(self) -> None:
        await self.registry.close()

    # ---- catalog ------------------------------------------------------------------------------
    def models(self, *kinds: ModelKind) -> list[ModelSpec]:
        return self.registry.of_kind(*kinds) if kinds else list(self.registry.specs.values())

    def spec_for(self, model: str | None, kind: ModelKind) -> ModelSpec:
        """The served `model` of `kind`. An omitted model means the only one of its kind (the
        openai-server seed serves one model and ignores `model`); with several it must be named."""
        if not model:
            found = self.registry.of_kind(kind)
            if len(found) == 1:
                return found[0]
            raise InvalidInput(f"'model' is required ({len(found)} {kind.plural} are served)", "model")
        return self.registry.resolve(model, [kind])

    def loaded(self) -> list[dict[str, Any]]:
        return self.registry.ps()

    def gauges(self) -> dict[str, float]:
        return {"requests_in_flight": self.admission.in_flight, "requests_queued": self.admission.queued,
                "requests_rejected_total": self.admission.rejected, "models_loaded": len(self.registry.loaded),
                "models_served": len(self.registry.specs)}
