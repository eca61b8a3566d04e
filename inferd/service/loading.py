"""The composition root: (kind, format) -> loader. A loader builds the leaf runtime from a
spec and the typed RuntimeOptions, wraps it in its scheduler and returns a typed handle
(handles.py). This is the one place that knows which runtime serves which model and how it
is scheduled; runtimes know neither the registry nor the schedulers.

Runtime modules are imported on first load, so listing models or serving one kind never
imports the native libraries of another. A new runtime plugs in here with one entry."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferd.config import Settings
from inferd.errors import ModelLoadFailed, ModelNotSupported, NotImplementedYet
from inferd.models import ModelKind, ModelSpec
from inferd.registry.builtins import materialize
from inferd.runtimes.options import RuntimeOptions
from inferd.scheduling.batcher import Batcher
from inferd.scheduling.disk_cache import DiskCache
from inferd.scheduling.generation import GenerationEngine
from inferd.scheduling.speech import SpeechQueue
from inferd.service.handles import (EncoderHandle, EncoderRuntime, GeneratorHandle, Handle, PredictorHandle,
                                   TranscriberHandle)

Loader = Callable[[ModelSpec, RuntimeOptions], Handle]


def runtime_options(settings: Settings) -> RuntimeOptions:
    """Built once per server from Settings: the only server configuration runtimes see."""
    return RuntimeOptions(threads=settings.threads or max(1, os.cpu_count() or 1), parallel=settings.parallel,
                          max_batch_tokens=settings.max_batch_tokens, max_batch_size=settings.max_batch_size,
                          prefer_quantized=settings.prefer_quantized, n_ctx=settings.ctx_size,
                          cache_dtype=settings.cache_dtype, n_gpu_layers=settings.n_gpu_layers,
                          cache_ram=settings.cache_ram * 1024 * 1024,
                          mmproj_threads=settings.mmproj_n_threads, mmproj_gpu=settings.mmproj_gpu,
                          cache_dir=str(settings.cache_dir) if settings.cache_dir else None,
                          cache_disk_size=settings.cache_disk_size,
                          # a full engine queue is a 503, never unbounded memory
                          max_waiting=max(settings.max_queued_requests, settings.parallel) * 4)


# ---- loaders ----------------------------------------------------------------------------------
def _generator(spec: ModelSpec, opts: RuntimeOptions) -> GeneratorHandle:
    from inferd.runtimes.llama_cpp import load_generator

    backend = load_generator(spec, opts)
    disk = None
    if opts.cache_dir and opts.cache_disk_size > 0:  # scheduling/disk_cache.py
        try:
            disk = DiskCache(Path(opts.cache_dir), opts.cache_disk_size, backend.cache_identity,
                             reuse_floor=backend.reuse_floor)
        except OSError as e:
            backend.close()
            raise ModelLoadFailed(f"model '{spec.name}': cannot use --cache-dir {opts.cache_dir}: {e}") from e
    engine = GenerationEngine(backend, name=spec.name, max_waiting=opts.max_waiting, host_cache_bytes=opts.cache_ram,
                              disk_cache=disk)
    handle = GeneratorHandle(backend, engine,
                             make_draft=functools.partial(_draft, backend, opts))
    try:
        handle.warm_up()
    except BaseException:
        handle.close()
        raise
    return handle


def _draft(target: Any, opts: RuntimeOptions, dspec: ModelSpec) -> Any:
    """A draft model for `target`'s speculation: its own copy of the weights and a context with
    one sequence per target slot, each as long as the target's (llama_cpp/draft.py)."""
    from inferd.runtimes.llama_cpp.draft import load_draft

    return load_draft(dspec, target, opts)


def _encoder(build: Callable[[ModelSpec, RuntimeOptions], EncoderRuntime]) -> Loader:
    """A loader that wraps what `build` returns in a dynamic batcher (the token budget is the
    server's, lowered to the model's own cap when it has one, e.g. sparse logits)."""
    def load(spec: ModelSpec, opts: RuntimeOptions) -> EncoderHandle[Any]:
        enc = build(spec, opts)
        budget = min(opts.max_batch_tokens, enc.max_batch_tokens or opts.max_batch_tokens)
        batcher = Batcher(enc.run_batch, max_tokens=budget, max_items=opts.max_batch_size, name=spec.name)
        return EncoderHandle(enc, batcher, size_bytes=_file_size(spec))

    return load


def _lazy(module: str, fn: str) -> Callable[[ModelSpec, RuntimeOptions], Any]:
    def build(spec: ModelSpec, opts: RuntimeOptions) -> Any:
        import importlib

        return getattr(importlib.import_module(module), fn)(spec, opts)

    return build


def _embedder(spec: ModelSpec, opts: RuntimeOptions) -> Handle:
    """ONNX embedders; one with a vision graph beside its text graph is a CLIP-style dual
    encoder (runtimes/onnx/clip.py) whose batcher takes texts and images."""
    if "image" in spec.capabilities:
        return _encoder(_lazy("inferd.runtimes.onnx.clip", "load"))(spec, opts)
    return _encoder(_lazy("inferd.runtimes.onnx", "load_embedder"))(spec, opts)


def _reader(spec: ModelSpec, opts: RuntimeOptions) -> Handle:
    """Readers (registry/readers.py says which): PP-OCR (runtimes/ocr) or a vision
    encoder-decoder (runtimes/onnx/vision_seq2seq.py), batched by images. A folder of an
    architecture with no runtime (Florence-2, ...) is refused with its reason."""
    reason = spec.manifest.get("unsupported")
    if reason:
        raise ModelNotSupported(f"reader '{spec.name}': {reason}")
    family = spec.manifest.get("reader")
    if family == "ppocr":
        return _encoder(_lazy("inferd.runtimes.ocr", "load"))(spec, opts)
    if family in ("trocr", "donut"):
        return _encoder(_lazy("inferd.runtimes.onnx.vision_seq2seq", "load"))(spec, opts)
    raise ModelNotSupported(f"reader '{spec.name}': no runtime for reader family {family!r}")


def _predictor(spec: ModelSpec, opts: RuntimeOptions) -> PredictorHandle:
    from inferd.runtimes.tabular import load

    p = load(spec, opts)
    return PredictorHandle(p, size_bytes=p.size_bytes)


def _transcriber(spec: ModelSpec, opts: RuntimeOptions) -> TranscriberHandle:
    """Whisper (CTranslate2 folder) or a CTC model (ONNX folder) behind a window-batching queue."""
    from inferd.runtimes import speech

    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    if spec.format == "ctranslate2":
        rt = speech.load_whisper(spec.path, threads=opts.threads, name=spec.name,
                                 compute_type=str(spec.manifest.get("compute_type") or "default"))
    else:
        rt = speech.load_ctc(spec.path, threads=opts.threads, name=spec.name,
                             language=str(spec.manifest.get("language") or "en"))
    # Windows per batch: 30 s of audio each; on CPU a batch of 8 is already several seconds of work.
    return TranscriberHandle(rt, SpeechQueue(rt, max_batch=min(8, opts.max_batch_size), name=spec.name),
                             size_bytes=_file_size(spec))


def _file_size(spec: ModelSpec) -> int:
    """Resident size of an encoder: about its weights on disk (onnxruntime maps them)."""
    if spec.size_bytes:
        return spec.size_bytes
    if spec.path is None:
        return 0
    p = spec.path
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


LOADERS: dict[tuple[ModelKind, str], Loader] = {
    # encoders: onnxruntime + tokenizers (runtimes/onnx), llama.cpp embeddings (runtimes/gguf_embed.py)
    (ModelKind.EMBEDDER, "onnx"): _embedder,
    (ModelKind.EMBEDDER, "safetensors"): _encoder(_lazy("inferd.runtimes.onnx", "load_embedder")),
    (ModelKind.EMBEDDER, "gguf"): _encoder(_lazy("inferd.runtimes.gguf_embed", "load_embedder")),
    (ModelKind.RERANKER, "onnx"): _encoder(_lazy("inferd.runtimes.onnx", "load_reranker")),
    (ModelKind.CHUNKER, "onnx"): _encoder(_lazy("inferd.runtimes.onnx", "load_chunker")),
    # generators: llama.cpp in a continuous-batching engine (runtimes/llama_cpp, scheduling/generation.py)
    (ModelKind.GENERATOR, "gguf"): _generator,
    # rewriters: seq2seq on onnxruntime or CTranslate2 (runtimes/seq2seq), batched by scheduling/seq2seq.py
    (ModelKind.REWRITER, "onnx"): _lazy("inferd.service.rewriting", "load_rewriter"),
    (ModelKind.REWRITER, "ctranslate2"): _lazy("inferd.service.rewriting", "load_rewriter"),
    # readers: PP-OCR (runtimes/ocr), TrOCR / Donut (runtimes/onnx/vision_seq2seq.py); other
    # formats are listed folders of architectures with no runtime, refused with their reason
    (ModelKind.READER, "onnx"): _reader,
    (ModelKind.READER, "safetensors"): _reader,
    (ModelKind.READER, "transformers"): _reader,
    # extraction (runtimes/extract: GLiNER, token and sequence classifiers; runtimes/spacy)
    (ModelKind.EXTRACTOR, "onnx"): _encoder(_lazy("inferd.runtimes.extract", "load_extractor")),
    (ModelKind.EXTRACTOR, "spacy"): _encoder(_lazy("inferd.runtimes.extract", "load_extractor")),
    (ModelKind.CLASSIFIER, "onnx"): _encoder(_lazy("inferd.runtimes.extract", "load_classifier")),
    # tabular predictors (runtimes/tabular): numpy only
    (ModelKind.PREDICTOR, "tabular"): _predictor,
    # speech (runtimes/speech): faster-whisper on CTranslate2, CTC on onnxruntime (scheduling/speech.py)
    (ModelKind.TRANSCRIBER, "ctranslate2"): _transcriber,
    (ModelKind.TRANSCRIBER, "onnx"): _transcriber,
}


class Loaders:
    """The registry's loader lookup: spec -> a function that loads it into a handle."""

    def __init__(self, options: RuntimeOptions, table: dict[tuple[ModelKind, str], Loader] | None = None):
        self.options = options
        self.table = LOADERS if table is None else table

    def __call__(self, spec: ModelSpec) -> Callable[[ModelSpec], Handle]:
        load = self.table.get((spec.kind, spec.format))
        if load is None:
            raise NotImplementedYet(f"no runtime in this build serves {spec.kind.value} models in "
                                    f"{spec.format} format (model '{spec.name}')")
        return functools.partial(_load, load, options=self.options)


def _load(load: Loader, spec: ModelSpec, options: RuntimeOptions) -> Handle:
    """Materialize a built-in's file (registry/builtins.py) first, then build the handle."""
    if spec.path is None and spec.source == "builtin":
        try:
            path = materialize(spec)
        except OSError as e:
            raise ModelLoadFailed(f"model '{spec.name}': {e}") from e
        if path is not None:
            spec = dataclasses.replace(spec, path=path)
    return load(spec, options)
