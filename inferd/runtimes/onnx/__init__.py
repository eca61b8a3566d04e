"""ONNX encoders on onnxruntime + tokenizers: embedders (dense, sparse), rerankers
(cross-encoder, late interaction) and token-classifier chunkers.

Loaders are registered in inferd/runtimes/__init__.py LOADERS. Each returns a runtime with
a dynamic batcher attached (inferd/scheduling/batcher.py) that owns the model's worker thread.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelLoadFailed
from inferd.registry.spec import ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.onnx.encoders import Embedder, OnnxEncoder, TokenClassifier
    from inferd.runtimes.onnx.files import ModelFiles

# onnx, onnxruntime and tokenizers are imported when a model loads, not with this package:
# the GGUF embedder shares prefixes.py and pooling.py without pulling them in.
log = logging.getLogger("inferd.runtimes.onnx")

SPARSE_LOGITS_BUDGET = 256 * 2**20  # bytes of [tokens, vocab] logits one sparse batch may make


def _opt(settings: Any, name: str, default: Any) -> Any:
    return getattr(settings, name, default) if settings is not None else default


def _threads(settings: Any) -> int | None:
    return _opt(settings, "threads", None) or (settings.n_threads if settings is not None else None)


def _graph(files: "ModelFiles", sparse: bool, mlm_head: bool = False) -> Any:
    import onnx

    from inferd.runtimes.onnx.graphs import bert_from_safetensors, with_splade_head

    if files.safetensors is not None:
        t0 = time.perf_counter()
        g = bert_from_safetensors(files.safetensors, files.config, mlm_head=sparse or mlm_head, splade=sparse)
        log.info("built an ONNX graph from %s in %.2fs", files.safetensors, time.perf_counter() - t0)
        return g
    if sparse:
        return with_splade_head(onnx.load(str(files.graph))).SerializeToString()
    return files.graph


def _build(cls: type["OnnxEncoder"], spec: ModelSpec, settings: Any, sparse: bool = False) -> "OnnxEncoder":
    from inferd.runtimes.onnx.encoders import Embedder
    from inferd.runtimes.onnx.files import locate, max_length
    from inferd.runtimes.onnx.session import OnnxSession
    from inferd.runtimes.onnx.tokenize import TextTokenizer
    from inferd.scheduling.batcher import Batcher

    files = locate(spec, prefer_quantized=_opt(settings, "prefer_quantized", True))
    if files.safetensors is not None and cls is not Embedder:
        raise ModelLoadFailed(f"model '{spec.name}': {cls.__name__} needs an ONNX export (found only safetensors)")
    session = OnnxSession(_graph(files, sparse), threads=_threads(settings))
    tokenizer = TextTokenizer(str(files.tokenizer))  # read once; its own limit is one input of max_length
    tokenizer.set_max_length(max_length(files, tokenizer.file_max_length))
    runtime = cls(spec, files, session, tokenizer)
    budget = int(_opt(settings, "max_batch_tokens", 8192))
    if sparse:
        vocab = int(files.config.get("vocab_size") or tokenizer.vocab_size)
        budget = min(budget, max(64, SPARSE_LOGITS_BUDGET // (4 * vocab)))
    runtime.batcher = Batcher(runtime.run_batch, max_tokens=budget,
                              max_items=int(_opt(settings, "max_batch_size", 512)), name=spec.name)
    log.info("%s %s: %s, max_length %d, batch budget %d tokens", cls.__name__, spec.name,
             files.graph or files.safetensors, tokenizer.max_length, budget)
    return runtime


def load_embedder(spec: ModelSpec, settings: Any = None) -> "Embedder":
    from inferd.runtimes.onnx.encoders import Embedder

    return _build(Embedder, spec, settings, sparse="sparse" in spec.capabilities)  # type: ignore[return-value]


def load_reranker(spec: ModelSpec, settings: Any = None) -> "OnnxEncoder":
    from inferd.runtimes.onnx.encoders import CrossEncoder, LateInteraction

    late = bool(spec.capabilities & {"late_interaction", "colbert"})
    return _build(LateInteraction if late else CrossEncoder, spec, settings)


def load_chunker(spec: ModelSpec, settings: Any = None) -> "TokenClassifier":
    from inferd.runtimes.onnx.encoders import TokenClassifier

    return _build(TokenClassifier, spec, settings)  # type: ignore[return-value]
