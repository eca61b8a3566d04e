"""ONNX encoders on onnxruntime + tokenizers: embedders (dense, sparse), rerankers
(cross-encoder, late interaction) and token-classifier chunkers.

Each load_* function builds a bare encoder from a spec and RuntimeOptions; the composition
root (inferd/service/loading.py) wraps it in a dynamic batcher that owns its worker thread.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelLoadFailed
from inferd.models import ModelSpec
from inferd.runtimes.options import RuntimeOptions

if TYPE_CHECKING:
    from inferd.runtimes.onnx.encoders import Embedder, OnnxEncoder, TokenClassifier
    from inferd.runtimes.onnx.files import ModelFiles

# onnx, onnxruntime and tokenizers are imported when a model loads, not with this package:
# the GGUF embedder shares prefixes.py and pooling.py without pulling them in.
log = logging.getLogger("inferd.runtimes.onnx")

SPARSE_LOGITS_BUDGET = 256 * 2**20  # bytes of [tokens, vocab] logits one sparse batch may make


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


def _build(cls: type["OnnxEncoder"], spec: ModelSpec, opts: RuntimeOptions, sparse: bool = False) -> "OnnxEncoder":
    from inferd.runtimes.onnx.encoders import Embedder
    from inferd.runtimes.onnx.files import locate, max_length
    from inferd.runtimes.onnx.session import OnnxSession
    from inferd.runtimes.onnx.tokenize import TextTokenizer

    files = locate(spec, prefer_quantized=opts.prefer_quantized)
    if files.safetensors is not None and cls is not Embedder:
        raise ModelLoadFailed(f"model '{spec.name}': {cls.__name__} needs an ONNX export (found only safetensors)")
    session = OnnxSession(_graph(files, sparse), threads=opts.threads, spin=False)  # batched: see open_session
    tokenizer = TextTokenizer(str(files.tokenizer))  # read once; its own limit is one input of max_length
    tokenizer.set_max_length(max_length(files, tokenizer.file_max_length))
    runtime = cls(spec, files, session, tokenizer)
    runtime.parallel = max(1, opts.threads)  # concurrent shards of a large batch (OnnxEncoder)
    if sparse:  # a sparse batch makes [tokens, vocab] float logits: bound their bytes
        vocab = int(files.config.get("vocab_size") or tokenizer.vocab_size)
        runtime.max_batch_tokens = max(64, SPARSE_LOGITS_BUDGET // (4 * vocab))
    log.info("%s %s: %s, max_length %d", cls.__name__, spec.name, files.graph or files.safetensors,
             tokenizer.max_length)
    return runtime


def load_embedder(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions()) -> "Embedder":
    from inferd.runtimes.onnx.encoders import Embedder

    return _build(Embedder, spec, opts, sparse="sparse" in spec.capabilities)  # type: ignore[return-value]


def load_reranker(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions()) -> "OnnxEncoder":
    from inferd.runtimes.onnx.encoders import CrossEncoder, LateInteraction

    late = bool(spec.capabilities & {"late_interaction", "colbert"})
    return _build(LateInteraction if late else CrossEncoder, spec, opts)


def load_chunker(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions()) -> "TokenClassifier":
    from inferd.runtimes.onnx.encoders import TokenClassifier

    return _build(TokenClassifier, spec, opts)  # type: ignore[return-value]
