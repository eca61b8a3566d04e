"""InferenceService: the one facade every API face calls. It is composed, with explicit
dependencies, of one service per domain; faces convert wire formats to these calls and
back, and never touch the registry themselves.

    catalog     names -> specs, one rule for every route           (core.py)
    generation  chat / completion on the engines, /stop, tokenize  (generation.py)
    lora        adapter choice per generator                       (lora.py)
    encoders    embeddings, rerank, chunk boundaries               (encoders.py)
    chunking    /ai/v1/chunk with its cache; `semantic`            (chunking.py, semantic_chunking.py)
    tabular     /ml/v1 predictors                                  (tabular.py)
    speech      transcription, translation (/v1/audio, /ai/v1)     (speech.py)
    synthesis   text to speech (/v1/audio/speech)                  (synthesis.py)
    realtime    live transcription sessions (/v1/realtime)         (realtime.py)
    extraction  /ai/v1/extract: entities, relations, classes, structures (extraction.py)
    media       image byte and pixel budgets                       (scheduling/media.py)
    reading     /ai/v1/read on readers (OCR, TrOCR, Donut)         (reading.py)
    images      image embeddings, multimodal rerank                (image_embed.py)

    models_mgr  pull, delete, copy, create, blobs, GGUF headers     (models.py)
    files       /v1/files, the stored uploads speech requests name (storage/files.py)

The model verbs share one pipeline (verb.py: resolve, admit, hold the typed handle, prepare,
submit, the per-item policy). Model loading is composed in loading.py: (kind, format) ->
loader -> typed handle. Routes call only the methods of this facade."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from inferd.config import Settings
from inferd.errors import InferdError, ModelNotSupported
from inferd.kinds import GENERATOR
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
from inferd.service.speech import SpeechLimits, SpeechService, TranscribeRequest, Transcription, TranscriptionStream
from inferd.service.synthesis import SpeakRequest, SpeechStream, SynthesisService
from inferd.service.realtime import RealtimeLimits, RealtimeService
from inferd.service.rewriting import RewriteOptions, RewriteResult, RewritingService
from inferd.service.extraction import ExtractResult
from inferd.extraction_types import ExtractOptions, ExtractSchema
from inferd.storage.files import FileStore
from inferd.service.image_embed import ImageEmbeddingService, ImageEmbedInput, Part
from inferd.service.reading import ReadingService, ReadResult
from inferd.service.models import ModelManager
from inferd.service.prep import PrepPool
from inferd.service.tabular import PredictResult, Rows, TabularService
from inferd.media.sources import MediaRef
from inferd.scheduling.media import MediaAdmission, MediaLimits
from inferd.text.chunking import FixedConfig
from inferd.text.semantic import SemanticConfig
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
                                 show_prompts=settings.slots_show_prompts, metrics=self.metrics)
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
        self.synthesis = SynthesisService(self.catalog, registry, admission)
        # /v1/realtime transcription sessions: turns go through the speech service's queue
        self.realtime = RealtimeService(self.speech, RealtimeLimits(settings.realtime_max_sessions,
                                                                    settings.realtime_max_buffer_seconds))
        self.rewriting = RewritingService(self.catalog, registry, admission, settings.max_batch_inputs)
        self.reading = ReadingService(self.catalog, registry, admission, self.media)
        self.images = ImageEmbeddingService(self.catalog, registry, admission, self.media, self.encoders)
        self.extraction = ExtractionService(self.catalog, registry, admission, self.generation.generate,
                                            settings.max_batch_inputs, self.reading.read)
        self.models_mgr = ModelManager(settings, registry)  # pull, delete, copy, create, blobs
        self._files: FileStore | None = None  # /v1/files: made on first use (it creates its folder)

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
        if kind is ModelKind.EMBEDDER:  # a GGUF generator may embed (openai-server's rule, Catalog)
            return self.catalog.resolve_embedder(model)
        return self.catalog.resolve(model, kind)

    def loaded(self) -> list[dict[str, Any]]:
        return self.catalog.loaded()

    def is_loaded(self, name: str) -> bool:
        return self.catalog.is_loaded(name)

    async def load_model(self, model: str) -> ModelSpec:
        """Load any model now, of any kind (it then idles out by keep-alive): a served name, or,
        with --allow-downloads, a Hub name, fetched first as any request would. The built-in
        `fixed` chunker (code, no weights) is a 400. -> the served spec after the load (a pulled
        model's own name, which its other spellings resolve to)."""
        spec = self.resolve(model)
        if spec.format == "builtin" and spec.path is None:  # the `fixed` chunker: code, no weights
            raise ModelNotSupported(f"'{spec.name}' is built into the server and has nothing to load")
        async with self.registry.use(spec.name):
            pass
        return self.registry.lookup(spec.name) or spec

    async def unload_model(self, model: str) -> tuple[ModelSpec, bool]:
        """Unload now (a busy model goes when its last request ends). Only served models: a name
        that would have to be downloaded is a 404, never a fetch. -> (spec, whether it was loaded)."""
        spec = self.resolve_served(model)
        return spec, await self.registry.unload(spec.name)

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

    # ---- speech ---------------------------------------------------------------------------------
    def transcriber_spec(self, model: str | None) -> ModelSpec:
        """The served transcriber (404 unknown, 400 another kind): checked before audio is read."""
        return self.speech.spec(model)

    async def transcribe(self, req: TranscribeRequest) -> Transcription:
        return await self.speech.transcribe(req)

    async def open_transcription(self, req: TranscribeRequest) -> TranscriptionStream:
        """A running transcription, window by window (request errors raise here, before a stream)."""
        return await self.speech.open(req)

    # ---- rewriting, extraction -----------------------------------------------------------------
    async def rewrite(self, model: str | None, inputs: Sequence[str], options: RewriteOptions, *,
                      per_item: bool = False, truncate: bool = True, keep_alive: float | None = None) -> RewriteResult:
        return await self.rewriting.rewrite(model, inputs, options, per_item=per_item, truncate=truncate,
                                            keep_alive=keep_alive)

    async def extract(self, model: str | None, inputs: Sequence[Any], schema: ExtractSchema, options: ExtractOptions,
                      per_item: bool = False) -> ExtractResult:
        return await self.extraction.extract(model, inputs, schema, options, per_item)

    # ---- model management (models.py) ----------------------------------------------------------
    async def check_pull(self, name: str, *, hub: bool | None = None, insecure: bool = False) -> None:
        await self.models_mgr.check_pull(name, hub=hub, insecure=insecure)

    async def pull_model(self, name: str, on_event: Callable[[dict[str, Any]], None] | None = None, *,
                         hub: bool | None = None, insecure: bool = False) -> ModelSpec:
        return await self.models_mgr.pull(name, on_event, hub=hub, insecure=insecure)

    async def delete_model(self, name: str) -> None:
        await self.models_mgr.delete(name)

    async def copy_model(self, source: str, destination: str) -> ModelSpec:
        return await self.models_mgr.copy(source, destination)

    async def create_model(self, name: str, *, source: str | None, files: dict[str, str] | None,
                           template: str | None, system: str | None, parameters: dict[str, Any] | None) -> ModelSpec:
        return await self.models_mgr.create(name, source=source, files=files, template=template, system=system,
                                            parameters=parameters)

    def check_blob(self, digest: str) -> None:
        """404 unless the blob `digest` is stored (Ollama's HEAD /api/blobs)."""
        self.models_mgr.blob_path(digest, must_exist=True)

    async def save_blob(self, digest: str, chunks: AsyncIterator[bytes], length: int | None) -> None:
        await self.models_mgr.save_blob(digest, chunks, length)

    def gguf_metadata(self, spec: ModelSpec) -> dict[str, Any]:
        """A GGUF model's header (cached; blocking: call it on a thread)."""
        return self.models_mgr.gguf_metadata(spec)

    def slot_context(self, spec: ModelSpec) -> int | None:
        """The slot context of `spec` when it is a loaded generator, else None (not loaded)."""
        handle = self.registry.handle(spec.name, GENERATOR)
        return None if handle is None else getattr(handle.runtime, "n_ctx_seq", None)

    def model_events(self) -> AsyncIterator[dict[str, Any]]:
        """What the server does with models (/models/events): downloading, loading, loaded, ..."""
        return self.models_mgr.events.subscribe()

    @property
    def media_limits(self) -> MediaLimits:
        """The image and audio limits (the body-limit middleware sizes upload routes by them)."""
        return self.media.limits

    # ---- files (/v1/files) -----------------------------------------------------------------------
    @property
    def files(self) -> FileStore:
        if self._files is None:
            s = self.settings
            self._files = FileStore.for_data_dir(s.data_dir, max_file_bytes=s.max_file_bytes,
                                                 max_total_bytes=s.max_files_total_bytes)
        return self._files

    # The store touches the disk: every call runs on a worker thread.
    async def upload_file(self, src: BinaryIO, filename: str, purpose: str, size: int | None) -> dict[str, Any]:
        return await asyncio.to_thread(self.files.create, src, filename, purpose, size)

    async def list_files(self, purpose: str | None = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.files.list, purpose)

    async def file_info(self, file_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.files.get, file_id)

    async def file_content(self, file_id: str) -> tuple[Path, dict[str, Any]]:
        """A stored file's path and its metadata (404 unknown)."""
        meta = await self.file_info(file_id)
        return self.files.root / meta["id"], meta

    async def delete_file(self, file_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.files.delete, file_id)

    async def read_audio_file(self, file_id: str, limit: int, where: str) -> bytes:
        """A stored audio file named by its `file-...` id in a speech request (at most `limit` bytes)."""
        return await asyncio.to_thread(self.files.read_audio, file_id, limit, where)

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

    # ---- text to speech -----------------------------------------------------------------------
    async def open_speech(self, req: SpeakRequest) -> SpeechStream:
        return await self.synthesis.open(req)

    async def speak(self, req: SpeakRequest) -> tuple[Any, SpeechStream]:
        return await self.synthesis.speak(req)

    # ---- readers ------------------------------------------------------------------------------
    async def read(self, model: str | None, images: Sequence[MediaRef], prompt: str | None = None,
                   max_tokens: int = 256) -> ReadResult:
        return await self.reading.read(model, images, prompt, max_tokens)

    async def rerank(self, model: str | None, query: str, documents: Sequence[str],
                     keep_alive: float | None = None, param: str = "documents") -> RerankResult:
        return await self.encoders.rerank(model, query, documents, keep_alive, param)

    async def chunk(self, text: str, model: str, cfg: FixedConfig, threshold: float = 0.5,
                    semantic: SemanticConfig | None = None) -> ChunkResult:
        return await self.chunking.chunk(text, model, cfg, threshold, semantic)

    def predictors(self) -> dict[str, dict[str, Any]]:
        return self.tabular.predictors()

    def predictor_info(self, spec: ModelSpec) -> dict[str, Any]:
        return self.tabular.predictor_info(spec)

    async def predict(self, model: str, rows: Rows) -> PredictResult:
        return await self.tabular.predict(model, rows)


__all__ = ["InferenceService", "ChunkResult", "EmbedResult", "ExtractResult", "GenerationStream", "PredictResult",
           "RerankResult", "RewriteResult", "SpeakRequest", "SpeechStream", "available_backends", "discover_all"]
