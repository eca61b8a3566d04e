"""InferenceService: the one facade every API face calls. It is composed, with explicit
dependencies, of one service per domain; faces convert wire formats to these calls and
back, and never touch the registry themselves.

    catalog     names -> specs, one rule for every route           (core.py)
    generation  chat / completion on the engines, /stop, tokenize  (generation.py)
    lora        adapter choice per generator                       (lora.py)
    encoders    embeddings, rerank, chunk boundaries               (encoders.py)
    chunking    /ai/v1/chunk with its cache                        (chunking.py)
    tabular     /ml/v1 predictors                                  (tabular.py)
    speech      transcription, translation (/v1/audio, /ai/v1)     (speech.py)
    realtime    live transcription sessions (/v1/realtime)         (realtime.py)
    extraction  /ai/v1/extract: entities, relations, classes, structures (extraction.py)
    media       image byte and pixel budgets                       (scheduling/media.py)
    reading     /ai/v1/read on readers (OCR, TrOCR, Donut)         (reading.py)
    images      image embeddings, multimodal rerank                (image_embed.py)

Model loading is composed in loading.py: (kind, format) -> loader -> typed handle."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from inferd.config import Settings
from inferd.errors import InferdError, ModelNotSupported
from inferd.metrics import Metrics
from inferd.models import ModelKind, ModelSpec
from inferd.observability.drain import Drain
from inferd.observability.observer import Observer
from inferd.observability.tracing import make_tracer
from inferd.registry.registry import Registry
from inferd.scheduling.admission import Admission
from inferd.service.chunking import ChunkingService, ChunkResult
from inferd.service.core import Catalog, available_backends, discover_all
from inferd.service.encoders import EmbedResult, EncoderService, RerankResult
from inferd.service.extraction import ExtractionService
from inferd.service.generation import GenerationService, GenerationStream
from inferd.service.loading import Loaders, runtime_options
from inferd.service import llama_props, model_info
from inferd.service.lora import LoraService
from inferd.service.speech import SpeechLimits, SpeechService
from inferd.service.realtime import RealtimeLimits, RealtimeService
from inferd.service.rewriting import RewriteResult, RewritingService
from inferd.service.image_embed import ImageEmbeddingService, ImageEmbedInput, Part
from inferd.service.reading import ReadingService, ReadResult
from inferd.service.models import ModelManager
from inferd.service.prep import PrepPool
from inferd.service.tabular import PredictResult, Rows, TabularService
from inferd.media.sources import MediaRef
from inferd.scheduling.media import MediaAdmission, MediaLimits
from inferd.text.chunking import FixedConfig
from inferd.types import GenerateRequest, Generation, LoraRef


UNBOUNDED = 10**9  # admission units: more than any machine runs at once


class InferenceService:
    def __init__(self, settings: Settings, registry: Registry, admission: Admission,
                 problems: list[str] | None = None, metrics: Metrics | None = None):
        self.settings, self.registry, self.admission = settings, registry, admission
        self.problems = problems or []
        self.metrics = metrics or Metrics()
        self.backends = available_backends()
        self.started_at = time.time()
        self.catalog = Catalog(registry)
        # /metrics per model, /load, /slots, drain, traces; every load is observed (time, stats attached)
        self.observer = Observer(registry, admission, Drain(settings.drain_timeout),
                                 show_prompts=settings.slots_show_prompts)
        self.observer.tracer = make_tracer(settings)
        # a drain that times out closes every model: what they hold fails with a retryable 503
        self.observer.drain.on_timeout.append(registry.close)
        registry.loader_for = self.observer.wrap_loader(registry.loader_for)
        self.lora = LoraService(self.catalog, registry)
        self.media = MediaAdmission(MediaLimits.from_settings(settings))
        self.generation = GenerationService(self.catalog, registry, admission, self.lora, self.metrics, self.media,
                                            PrepPool(settings.prep_threads), settings.reasoning_budget)
        self.generation.ignore_images_without_projector = settings.ignore_images_without_projector
        self.encoders = EncoderService(self.catalog, registry, admission, settings.max_batch_inputs)
        self.chunking = ChunkingService(self.catalog, admission, self.encoders)
        self.tabular = TabularService(self.catalog, registry, admission)
        self.speech = SpeechService(self.catalog, registry, admission,
                                    SpeechLimits(settings.max_audio_bytes, settings.max_audio_seconds))
        # /v1/realtime transcription sessions: turns go through the speech service's queue
        self.realtime = RealtimeService(self.speech, RealtimeLimits(settings.realtime_max_sessions,
                                                                    settings.realtime_max_buffer_seconds))
        self.rewriting = RewritingService(self.catalog, registry, admission, settings.max_batch_inputs)
        self.reading = ReadingService(self.catalog, registry, admission, self.media)
        self.images = ImageEmbeddingService(self.catalog, registry, admission, self.media, self.encoders)
        self.extraction = ExtractionService(self.catalog, registry, admission, self.generation.generate,
                                            settings.max_batch_inputs, self.reading.read)
        self.models_mgr = ModelManager(settings, registry)  # pull, delete, copy, create, load control

    @classmethod
    def from_settings(cls, settings: Settings) -> "InferenceService":
        found = discover_all(settings)
        registry = Registry.build(found.specs, Loaders(runtime_options(settings)), keep_alive=settings.keep_alive,
                                  max_loaded=settings.max_loaded_models, max_memory=settings.max_memory)
        # max_concurrent_requests 0: unbounded (the spec's admission.inference setting)
        admission = Admission(settings.max_concurrent_requests or UNBOUNDED, settings.max_queued_requests,
                              settings.queue_timeout)
        return cls(settings, registry, admission, problems=found.problems)

    async def start(self) -> None:
        self.registry.start()

    async def close(self) -> None:
        self.models_mgr.close()
        await self.registry.close()

    # ---- catalog ------------------------------------------------------------------------------
    def models(self, *kinds: ModelKind) -> list[ModelSpec]:
        return self.catalog.models(*kinds)

    def resolve(self, model: str | None, *kinds: ModelKind, default: str | None = None) -> ModelSpec:
        return self.catalog.resolve(model, *kinds, default=default)

    def lookup(self, name: str | None) -> ModelSpec | None:
        """The served model called `name` (or another spelling of it), else None: for faces that
        apply a model's own defaults before validating (Ollama Modelfile options)."""
        return self.registry.lookup(name) if name else None

    def resolve_served(self, name: str | None, *kinds: ModelKind) -> ModelSpec:
        """resolve() for catalogs: a model that would only be downloaded on use is a 404."""
        return self.registry.resolve_served(name, kinds or None)

    def spec_for(self, model: str | None, kind: ModelKind) -> ModelSpec:
        return self.catalog.resolve(model, kind)

    def loaded(self) -> list[dict[str, Any]]:
        return self.catalog.loaded()

    def is_loaded(self, name: str) -> bool:
        return self.catalog.is_loaded(name)

    async def load_model(self, model: str) -> ModelSpec:
        """Load any served model now (it then idles out by keep-alive)."""
        spec = self.resolve(model)
        if spec.format == "builtin" and spec.path is None:  # the `fixed` chunker: code, no weights
            raise ModelNotSupported(f"'{spec.name}' is built into the server and has nothing to load")
        async with self.registry.use(spec.name):
            return spec

    async def unload_model(self, model: str) -> bool:
        """Unload now (a busy model goes when its last request ends); False: it was not loaded."""
        return await self.registry.unload(self.resolve(model).name)

    def model_state(self, spec: ModelSpec) -> dict[str, Any]:
        """Per-model state for catalogs: LoRA adapter, whether it is loaded and, if so, its
        estimated resident size (the memory budget's figure)."""
        entry = self.registry.loaded.get(spec.name)
        state: dict[str, Any] = {**self.lora.info(spec), "loaded": entry is not None}
        if entry is not None:
            state["size_bytes"] = entry.size_bytes
        return state

    async def chat_template(self, spec: ModelSpec) -> str | None:
        """The chat template requests to `spec` are rendered with (without loading it)."""
        return await model_info.chat_template(self.registry, spec)

    def gauges(self) -> dict[str, float]:
        gauges: dict[str, float] = {
            "requests_in_flight": self.admission.in_flight, "requests_queued": self.admission.queued,
            "requests_rejected_total": self.admission.rejected, "models_loaded": len(self.registry.loaded),
            "models_served": len(self.registry.specs),
            # per model: inferd_model_loads_total{model} and ..._failures_total{model} (observability/)
            "models_resident_bytes": self.registry.resident_bytes(), "memory_budget_bytes": self.registry.max_memory,
            "media_pixel_bytes_reserved": self.media.held, "media_pixel_budget_bytes": self.media.limits.pixel_bytes,
            **self.realtime.gauges()}
        return gauges

    # ---- generation ---------------------------------------------------------------------------
    def generator_spec(self, model: str | None) -> ModelSpec:
        return self.generation.spec(model)

    async def open_generation(self, req: GenerateRequest, admit: bool = True) -> GenerationStream:
        return await self.generation.open(req, admit)

    async def generate(self, req: GenerateRequest, admit: bool = True) -> Generation:
        return await self.generation.generate(req, admit)

    async def generate_batch(self, reqs: list[GenerateRequest | InferdError]) -> list[Generation | InferdError]:
        return await self.generation.generate_batch(reqs)

    async def count_prompt_tokens(self, req: GenerateRequest) -> tuple[str, int]:
        return await self.generation.count_prompt_tokens(req)

    async def load_generator(self, model: str | None, keep_alive: float | None = None) -> ModelSpec:
        return await self.generation.load(model, keep_alive)

    async def tokenize(self, model: str | None, content: str, add_special: bool = False,
                       parse_special: bool = True) -> tuple[str, list[int], list[bytes]]:
        return await self.generation.tokenize(model, content, add_special, parse_special)

    async def detokenize(self, model: str | None, tokens: list[int]) -> tuple[str, str]:
        return await self.generation.detokenize(model, tokens)

    def stop_generation(self, model: str | None = None) -> int:
        return self.generation.stop(model)

    # ---- LoRA ---------------------------------------------------------------------------------
    def lora_info(self, spec: ModelSpec) -> dict[str, Any]:
        return self.lora.info(spec)

    async def set_lora(self, model: str | None, name: str | None) -> tuple[ModelSpec, str | None]:
        return await self.lora.set(model, name)

    def lora_adapters(self, model: str | None) -> tuple[ModelSpec, list[dict[str, Any]]]:
        spec = self.generation.spec(model)
        return spec, self.lora.adapters_table(spec)

    async def set_lora_scales(self, model: str | None, refs: list[LoraRef]) -> ModelSpec:
        return await self.lora.set_scales(model, refs)

    def adapter_models(self) -> list[tuple[str, ModelSpec]]:
        """(`base:adapter`, base spec) of every generator's adapters: served names too."""
        return [(n, s) for s in self.models(ModelKind.GENERATOR) for n in self.lora.served_names(s)]

    # ---- llama-server helpers (llama_props.py) --------------------------------------------------
    async def props(self, model: str | None) -> llama_props.Props:
        return await llama_props.props(self.generation, model)

    async def apply_template(self, model: str | None, messages: list[dict[str, Any]],
                             template_kwargs: dict[str, Any], tools: list[dict[str, Any]] | None) -> str:
        return await llama_props.apply_template(self.generation, model, messages, template_kwargs, tools)

    # ---- encoders, chunking, tabular ----------------------------------------------------------
    async def embed(self, model: str | None, inputs: Sequence[ImageEmbedInput], **kw: Any) -> EmbedResult:
        if any(isinstance(x, MediaRef) for x in inputs):  # image parts: media admission first
            return await self.images.embed(model, inputs, **kw)
        return await self.encoders.embed(model, [x for x in inputs if not isinstance(x, MediaRef)], **kw)

    def multimodal_rerank_spec(self, model: str | None) -> ModelSpec:
        return self.images.rerank_spec(model)

    async def rerank_multimodal(self, model: str | None, query: str,
                                documents: Sequence[Sequence[Part]]) -> RerankResult:
        return await self.images.rerank_multimodal(model, query, documents)

    # ---- readers ------------------------------------------------------------------------------
    async def read(self, model: str | None, images: Sequence[MediaRef], prompt: str | None = None,
                   max_tokens: int = 256) -> ReadResult:
        return await self.reading.read(model, images, prompt, max_tokens)

    async def rerank(self, model: str | None, query: str, documents: Sequence[str],
                     keep_alive: float | None = None, param: str = "documents") -> RerankResult:
        return await self.encoders.rerank(model, query, documents, keep_alive, param)

    async def chunk(self, text: str, model: str, cfg: FixedConfig, threshold: float = 0.5) -> ChunkResult:
        return await self.chunking.chunk(text, model, cfg, threshold)

    def predictors(self) -> dict[str, dict[str, Any]]:
        return self.tabular.predictors()

    def predictor_info(self, spec: ModelSpec) -> dict[str, Any]:
        return self.tabular.predictor_info(spec)

    async def predict(self, model: str, rows: Rows) -> PredictResult:
        return await self.tabular.predict(model, rows)


__all__ = ["InferenceService", "ChunkResult", "EmbedResult", "GenerationStream", "PredictResult", "RerankResult",
           "RewriteResult", "available_backends", "discover_all"]
