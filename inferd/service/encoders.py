"""Encoder verbs: embed (dense and sparse), rerank, and the model-based half of chunking.

Every verb runs service/verb.py's pipeline: resolve the served name (unknown -> 404, wrong
kind -> 400), take an admission slot, hold the loaded runtime, tokenize off the event loop,
then hand the items to the model's dynamic batcher, which runs them with other requests' items
in shared forward passes."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.errors import InferdError, InvalidInput, ModelNotSupported
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.runtimes.common.pooling import truncate_dims
from inferd.scheduling.admission import Admission
from inferd.service.core import EMBEDDINGS_OF, Catalog
from inferd.kinds import CHUNKER, EMBEDDER, RERANKER
from inferd.service.handles import EmbedderRuntime
from inferd.service.verb import Verb, items_of, raise_first, total_chars
from inferd.service.input_limits import DEFAULT_MAX_BATCH_INPUTS, check_input_count
from inferd.text.chunking import Chunk, FixedConfig, chunks_from_boundaries

# Text, token ids, or an item a face already found unservable (its error: fails the request
# unless per_item, then it is that item's error).
EmbedInput = str | Sequence[int] | InferdError


@dataclass
class EmbedResult:
    model: str
    dims: int
    sparse: bool
    # One per input, in order: np.ndarray (dense), SparseVector (sparse), or the item's error.
    items: list[Any] = field(default_factory=list)
    prompt_tokens: int = 0
    load_seconds: float = 0.0  # waiting for the model to load (0 when it was loaded already)
    truncated: list[int] = field(default_factory=list)  # inputs cut to the model's limit

    @property
    def errors(self) -> list[tuple[int, InferdError]]:
        return [(i, x) for i, x in enumerate(self.items) if isinstance(x, InferdError)]


@dataclass
class RerankResult:
    model: str
    scores: list[float]
    prompt_tokens: int


class EncoderService:
    """Embeddings, rerank and model-based chunk boundaries on the encoders' dynamic batchers."""

    def __init__(self, catalog: Catalog, registry: Registry, admission: Admission,
                 max_inputs: int = DEFAULT_MAX_BATCH_INPUTS):
        self.catalog, self.registry, self.admission = catalog, registry, admission
        self.max_inputs = max_inputs  # --max-batch-inputs: embeddings inputs, rerank documents
        self.embedder = Verb(EMBEDDER, registry, admission)
        self.reranker = Verb(RERANKER, registry, admission)
        self.chunker = Verb(CHUNKER, registry, admission)

    async def embed(self, model: str | None, inputs: Sequence[EmbedInput], *, task: str | None = None,
                    dimensions: int | None = None, truncate: bool = True, per_item: bool = False,
                    keep_alive: float | None = None) -> EmbedResult:
        """Embeddings for `inputs`. With per_item, a bad input (empty, too long without
        truncation, bad token ids, failed batch) becomes that item's error; otherwise the first
        one fails the request."""
        spec = self.catalog.resolve_embedder(model)  # an embedder, or a GGUF generator's embedding twin
        check_embed_request(inputs, self.max_inputs, dimensions, per_item)  # fail fast before any model work
        async with self.embedder.use(spec.name, keep_alive) as held:
            rt: EmbedderRuntime = held.handle.runtime
            if dimensions is not None and rt.sparse:
                raise InvalidInput("dimensions does not apply to a sparse model", "dimensions")
            check_dimensions(dimensions, rt.dims)
            rt.prefix(task)  # an unknown task_type is the whole request's error
            ran = await self.embedder.each(held.handle, lambda: _prepare(rt, inputs, task, truncate),
                                           total_chars(inputs), per_item)
        cut = [i for i, p in enumerate(ran.prepared) if getattr(p, "truncated", False)]
        tokens = sum(len(ran.prepared[i]) for i, _ in ran.done)
        items = items_of(ran, lambda i, out: out if dimensions is None else truncate_dims(out, dimensions))
        served = str(spec.manifest.get(EMBEDDINGS_OF) or spec.name)  # a twin answers as its generator
        return EmbedResult(served, dimensions or rt.dims, rt.sparse, items, tokens, held.load_seconds, cut)

    async def rerank(self, model: str | None, query: str, documents: Sequence[str],
                     keep_alive: float | None = None, param: str = "documents") -> RerankResult:
        """Relevance of each document to `query`, in input order (higher is more relevant)."""
        spec = self.catalog.resolve(model, ModelKind.RERANKER)
        if not query.strip():
            raise InvalidInput("'query' must not be empty", "query")
        if not documents:  # one rule for empty lists everywhere (as for embedding inputs): 400
            raise InvalidInput(f"'{param}' must not be empty", param)
        check_input_count(len(documents), self.max_inputs, "documents")
        async with self.reranker.use(spec.name, keep_alive) as held:
            h = held.handle
            encs = await asyncio.to_thread(h.runtime.prepare, query, list(documents))
            outs = await h.scheduler.submit(encs, [len(e) for e in encs])
            scores = h.runtime.combine(outs, len(documents))
        return RerankResult(spec.name, scores, sum(len(e) for e in encs))

    async def model_chunks(self, spec: ModelSpec, text: str, cfg: FixedConfig, threshold: float) -> list[Chunk]:
        """Chunks from a token-classifier chunker: a chunk ends after each token whose boundary
        probability exceeds `threshold`; pieces over target_tokens are split the fixed way.
        No slot of its own: the chunking verb holds the request's."""
        if spec.format == "builtin":
            raise ModelNotSupported(f"'{spec.name}' is not a model-based chunker")
        async with self.chunker.hold(spec.name) as held:
            h = held.handle
            windows = await asyncio.to_thread(h.runtime.windows, text)
            probs = await h.scheduler.submit([w.enc for w in windows], [len(w.enc) for w in windows])
        ends = [w.offsets[j][1] for w, p in zip(windows, probs) for j in np.flatnonzero(p > threshold)]
        return await asyncio.to_thread(chunks_from_boundaries, text, ends, cfg)


def check_embed_request(inputs: Sequence[Any], max_inputs: int, dimensions: int | None, per_item: bool) -> None:
    """What an embeddings request must be before any model work (texts or images alike)."""
    if not inputs:
        raise InvalidInput("'input' must not be empty", "input")
    check_input_count(len(inputs), max_inputs, "inputs")
    if dimensions is not None and dimensions < 1:
        raise InvalidInput("dimensions must be at least 1", "dimensions")
    raise_first(inputs, per_item)


def check_dimensions(dimensions: int | None, dims: int) -> None:
    if dimensions is not None and dimensions > dims:
        raise InvalidInput(f"dimensions ({dimensions}) is larger than the model's {dims}", "dimensions")


def _prepare(rt: EmbedderRuntime, inputs: Sequence[EmbedInput], task: str | None, truncate: bool) -> list[Any]:
    """Tokenize every input (on a worker thread). Bad inputs become InvalidInput in place."""
    out: list[Any] = [None] * len(inputs)
    texts = [(i, x) for i, x in enumerate(inputs) if isinstance(x, str)]
    for i, x in texts:
        if not x.strip():
            out[i] = InvalidInput(f"input[{i}] is empty", "input")
    good = [(i, x) for i, x in texts if out[i] is None]
    if good:
        for (i, _), enc in zip(good, rt.prepare([x for _, x in good], task)):
            out[i] = enc
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            continue
        if isinstance(item, InferdError):
            out[i] = item
            continue
        if len(item) == 0:
            out[i] = InvalidInput(f"input[{i}] is empty", "input")
            continue
        try:
            out[i] = rt.prepare_ids(item)
        except InvalidInput as e:
            out[i] = InvalidInput(f"input[{i}]: {e.message}", "input")
    if not truncate:
        for i, enc in enumerate(out):
            if not isinstance(enc, InferdError) and enc.truncated:
                out[i] = InvalidInput(f"input[{i}] is longer than the model's limit of {rt.max_length} tokens "
                                      "and truncation is off (\"truncate\": true keeps the first "
                                      f"{rt.max_length})", "input")
    return out
