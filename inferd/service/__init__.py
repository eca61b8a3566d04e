"""InferenceService: the verbs every API face calls. It owns the registry and admission
control; faces convert wire formats to these calls and back, and know nothing else.

Verbs are grouped by domain in mixins (one module each); CoreService holds the state."""

from __future__ import annotations

import functools

from inferd.service.chunking import ChunkingVerbs, ChunkResult
from inferd.service.core import CoreService, available_backends, discover_all
from inferd.service.encoders import EmbedResult, EncoderVerbs, RerankResult
from inferd.service.generation import GenerationStream, GenerationVerbs
from inferd.service.lora import LoraVerbs
from inferd.service.rewriting import RewriteResult, RewritingService
from inferd.service.tabular import PredictResult, TabularVerbs
from inferd.runtimes import loader_for
from inferd.text.cache import TTLCache


class InferenceService(GenerationVerbs, LoraVerbs, TabularVerbs, EncoderVerbs, ChunkingVerbs, CoreService):
    def __post_init__(self) -> None:
        self._chunk_cache = TTLCache(ttl=120.0, max_items=1024)
        self._streams = set()  # running generations, for /stop
        self._lora = {}  # generator -> chosen LoRA adapter (service/lora.py)
        self._lora_locks = {}
        self._predictor_info = {}  # catalog entries of predictors not checked at discovery
        self.rewriting = RewritingService(self.registry, self.admission, self.settings, self.metrics)
        if self.registry.loader_for is loader_for:  # runtimes get threads and batch budgets from settings
            self.registry.loader_for = functools.partial(loader_for, settings=self.settings)


__all__ = ["InferenceService", "ChunkResult", "EmbedResult", "GenerationStream", "PredictResult", "RerankResult", "RewriteResult", "available_backends", "discover_all"]
