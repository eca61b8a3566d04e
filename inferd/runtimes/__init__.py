"""Runtimes: the only modules that import native inference libraries.

LOADERS maps (kind, format) to "module:function". Modules are imported on first load, so
listing models or serving one kind never imports the libraries of another."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from inferd.errors import NotImplementedYet
from inferd.registry.spec import ModelKind, ModelSpec

LOADERS: dict[tuple[ModelKind, str], str] = {
    # encoders (inferd/runtimes/onnx, gguf_embed.py)
    (ModelKind.EMBEDDER, "onnx"): "inferd.runtimes.onnx:load_embedder",
    (ModelKind.EMBEDDER, "safetensors"): "inferd.runtimes.onnx:load_embedder",  # BERT: graph built at load
    (ModelKind.EMBEDDER, "gguf"): "inferd.runtimes.gguf_embed:load_embedder",
    (ModelKind.RERANKER, "onnx"): "inferd.runtimes.onnx:load_reranker",
    (ModelKind.CHUNKER, "onnx"): "inferd.runtimes.onnx:load_chunker",
    # generators: continuous batching over llama.cpp (inferd/runtimes/llama_cpp, scheduling/generation.py)
    (ModelKind.GENERATOR, "gguf"): "inferd.runtimes.llama_cpp:load_generator",
    # rewriters: seq2seq on onnxruntime or CTranslate2 (runtimes/seq2seq; composed in service/rewriting.py)
    (ModelKind.REWRITER, "onnx"): "inferd.service.rewriting:load_rewriter",
    (ModelKind.REWRITER, "ctranslate2"): "inferd.service.rewriting:load_rewriter",
    # tabular predictors (inferd/runtimes/tabular): numpy only
    (ModelKind.PREDICTOR, "tabular"): "inferd.runtimes.tabular:load",
}


def loader_for(spec: ModelSpec, settings: Any = None) -> Callable[[ModelSpec], Any]:
    """The loader of `spec`. A loader that takes a `settings` keyword (threads, batch budget)
    gets the server's Settings bound here; InferenceService binds them for its registry."""
    target = LOADERS.get((spec.kind, spec.format))
    if target is None:
        raise NotImplementedYet(f"no runtime in this build serves {spec.kind.value} models in "
                                f"{spec.format} format (model '{spec.name}')")
    module, _, fn = target.partition(":")
    load = getattr(importlib.import_module(module), fn)
    if settings is not None and "settings" in inspect.signature(load).parameters:
        return functools.partial(load, settings=settings)
    return load
