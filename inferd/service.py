"""InferenceService: the verbs every API face calls. It owns the registry and admission
control; faces convert wire formats to these calls and back, and know nothing else."""

from __future__ import annotations

import asyncio
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
from inferd.text.cache import TTLCache
from inferd.text.chunking import Chunk, FixedConfig, count_tokens, fixed_chunks

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
class ChunkResult:
    model: str
    chunks: list[Chunk]
    prompt_tokens: int
    cache_hit: bool


@dataclass
class InferenceService:
    settings: Settings
    registry: Registry
    admission: Admission
    problems: list[str] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)
    backends: dict[str, bool] = field(default_factory=available_backends)
    started_at: float = field(default_factory=time.time)
    _chunk_cache: TTLCache = field(default_factory=lambda: TTLCache(ttl=120.0, max_items=1024))

    @classmethod
    def from_settings(cls, settings: Settings) -> "InferenceService":
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
        specs = list(self.registry.specs.values())
        return [s for s in specs if s.kind in kinds] if kinds else specs

    def loaded(self) -> list[dict[str, Any]]:
        return self.registry.ps()

    def gauges(self) -> dict[str, float]:
        return {"requests_in_flight": self.admission.in_flight, "requests_queued": self.admission.queued,
                "requests_rejected_total": self.admission.rejected, "models_loaded": len(self.registry.loaded),
                "models_served": len(self.registry.specs)}

    # ---- chunking -----------------------------------------------------------------------------
    async def chunk(self, text: str, model: str, cfg: FixedConfig, threshold: float = 0.5) -> ChunkResult:
        spec = self.registry.resolve(model or "fixed", [ModelKind.CHUNKER])
        cfg.check()
        if not (0.0 <= threshold <= 1.0):
            raise InvalidInput("threshold must be between 0 and 1", "config.threshold")
        key = (spec.name, cfg, threshold, text)
        hit = self._chunk_cache.get(key)
        if hit is not None:
            return ChunkResult(spec.name, hit, count_tokens(text), True)
        async with self.admission.slot():
            chunks = await asyncio.to_thread(fixed_chunks, text, cfg)
        self._chunk_cache.put(key, chunks)
        return ChunkResult(spec.name, chunks, count_tokens(text), False)
