"""Image embeddings on CLIP-style dual encoders: `/ai/v1/embed(dings)` with image parts, and
`/ai/v1/rerank_multimodal` over image and mixed documents.

Order, as for /read: served name and request checks (400/404), a capacity slot (503, nothing
fetched), media admission of every image (400/413, or per item with error_policy per_item),
decoding, and only then the model loads. Texts and images of one request go to the model's
batcher together; its worker runs each kind as one pass of its graph, shared with other
requests' items."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from inferd.errors import CapabilityMissing, InferdError, InvalidInput
from inferd.media.sources import MediaRef
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.scheduling.admission import Admission
from inferd.scheduling.media import MediaAdmission, decode_all
from inferd.service.core import Catalog
from inferd.kinds import EMBEDDER, RERANKER
from inferd.runtimes.common.pooling import truncate_dims
from inferd.service.encoders import (EmbedInput, EmbedResult, EncoderService, RerankResult, check_dimensions,
                                     check_embed_request)
from inferd.service.handles import ImageEmbedderRuntime
from inferd.service.image_rerank import late_interaction_rerank
from inferd.service.input_limits import check_input_count
from inferd.service.verb import Verb, items_of, raise_first

Part = str | MediaRef
ImageEmbedInput = EmbedInput | MediaRef  # what /ai/v1/embed(dings) may carry: texts, token ids, images


def no_image_support(spec: ModelSpec, where: str) -> CapabilityMissing:
    return CapabilityMissing(f"{where} is an image; model '{spec.name}' cannot embed images "
                             "(it needs the 'image' capability: a CLIP-style dual encoder)")


class ImageEmbeddingService:
    def __init__(self, catalog: Catalog, registry: Registry, admission: Admission, media: MediaAdmission,
                 text: EncoderService):
        self.catalog, self.registry, self.admission, self.media = catalog, registry, admission, media
        self.text = text  # text-only requests, and text models given images (their items become errors)
        self.verb = Verb(EMBEDDER, registry, admission)
        self.rerank_verb = Verb(RERANKER, registry, admission)  # late-interaction image rerankers

    async def _encode(self, spec: ModelSpec, inputs: Sequence[Any], task: str | None, per_item: bool,
                      keep_alive: float | None, dimensions: int | None = None,
                      truncate: bool = True) -> tuple[list[Any], int, int, float]:
        """Vectors (or per-item errors) for texts, token ids and image refs, in order; plus the
        model's dims, the text tokens used and the load time."""
        refs = [(i, x) for i, x in enumerate(inputs) if isinstance(x, MediaRef)]
        out: list[Any] = list(inputs)
        async with self.verb.slot(self.media.weight([r for _, r in refs])):
            async with self.media.admit([r for _, r in refs], per_item=per_item) as grant:
                decoded = await decode_all(grant)
                raise_first(decoded, per_item)
                for (i, _), img in zip(refs, decoded):
                    out[i] = img
                async with self.verb.hold(spec.name, keep_alive) as held:
                    # an embedder with the 'image' capability: its runtime is a dual encoder
                    rt = cast(ImageEmbedderRuntime, held.handle.runtime)
                    check_dimensions(dimensions, rt.dims)
                    rt.prefix(task)  # an unknown task_type is the whole request's error
                    # decoded images are heavy to preprocess: always on a worker thread
                    ran = await self.verb.each(held.handle, lambda: _prepare(rt, out, task, truncate), None,
                                               per_item)
        tokens = sum(len(ran.prepared[i]) for i, _ in ran.done if not isinstance(inputs[i], MediaRef))
        return items_of(ran), rt.dims, tokens, held.load_seconds

    async def embed(self, model: str | None, inputs: Sequence[Any], *, task: str | None = None,
                    dimensions: int | None = None, truncate: bool = True, per_item: bool = False,
                    keep_alive: float | None = None) -> EmbedResult:
        spec = self.catalog.resolve_embedder(model)
        kw: dict[str, Any] = dict(task=task, dimensions=dimensions, truncate=truncate, per_item=per_item,
                                  keep_alive=keep_alive)
        if not any(isinstance(x, MediaRef) for x in inputs):
            return await self.text.embed(model, [x for x in inputs if not isinstance(x, MediaRef)], **kw)
        if "image" not in spec.capabilities:  # each image is its item's error (or the request's)
            errs: list[EmbedInput] = [no_image_support(spec, f"input[{i}]") if isinstance(x, MediaRef) else x
                                      for i, x in enumerate(inputs)]
            return await self.text.embed(model, errs, **kw)
        check_embed_request(inputs, self.text.max_inputs, dimensions, per_item)
        items, dims, tokens, load = await self._encode(spec, inputs, task, per_item, keep_alive, dimensions,
                                                       truncate)
        if dimensions is not None:
            items = [truncate_dims(v, dimensions) if isinstance(v, np.ndarray) else v for v in items]
        return EmbedResult(spec.name, dimensions or dims, False, items, tokens, load)

    def rerank_spec(self, model: str | None) -> ModelSpec:
        """A reranker, or an image-capable embedder; an omitted model is the only reranker."""
        if not model:
            return self.catalog.resolve(model, ModelKind.RERANKER)
        return self.catalog.resolve(model, ModelKind.RERANKER, ModelKind.EMBEDDER)

    async def rerank_multimodal(self, model: str | None, query: str,
                                documents: Sequence[Sequence[Part]]) -> RerankResult:
        """Documents with image parts are scored by an image-capable embedder: cosine between
        the query's text vector and the document's (the normalised mean of its parts: its
        text, joined, and each image); or by a late-interaction image reranker (ColPali):
        MaxSim of the query's token vectors over the page's (service/image_rerank.py).
        Text-only documents on a text reranker keep the reranker."""
        spec = self.rerank_spec(model)
        has_images = any(isinstance(p, MediaRef) for d in documents for p in d)
        if spec.kind is ModelKind.RERANKER and "image" in spec.capabilities:
            return await late_interaction_rerank(self.rerank_verb, self.media, spec, query, documents,
                                                 self.text.max_inputs)
        if spec.kind is ModelKind.RERANKER:
            if has_images:
                raise CapabilityMissing(f"reranker '{spec.name}' scores text only; documents with images need a "
                                        "model that encodes images as 'model': a late-interaction image reranker "
                                        "(ColPali-style) or an embedder with the 'image' capability (CLIP-style)")
            return await self.text.rerank(spec.name, query,
                                          ["\n".join(p for p in d if isinstance(p, str)) for d in documents])
        if "image" not in spec.capabilities:
            raise CapabilityMissing(f"embedder '{spec.name}' cannot embed images; multimodal reranking needs a "
                                    "CLIP-style model with the 'image' capability")
        if not query.strip():
            raise InvalidInput("'query' must not be empty", "query")
        if not documents:
            return RerankResult(spec.name, [], 0)
        check_input_count(len(documents), self.text.max_inputs, "documents")
        flat: list[Any] = [query]
        owner: list[int] = [-1]
        for j, d in enumerate(documents):
            texts = [p for p in d if isinstance(p, str) and p.strip()]
            before = len(flat)
            if texts:
                flat.append("\n".join(texts))
                owner.append(j)
            for p in d:
                if isinstance(p, MediaRef):
                    flat.append(p)
                    owner.append(j)
            if len(flat) == before:
                raise InvalidInput(f"documents[{j}] has no text and no image", f"documents[{j}].content")
        vecs, _, tokens, _ = await self._encode(spec, flat, None, False, None)
        q = vecs[0]
        scores = []
        for j in range(len(documents)):
            parts = [v for v, o in zip(vecs, owner) if o == j]
            d = np.mean(parts, axis=0)
            d = d / max(float(np.linalg.norm(d)), 1e-12)
            scores.append(float(np.dot(q, d)))
        return RerankResult(spec.name, scores, tokens)


def _prepare(rt: Any, inputs: Sequence[Any], task: str | None, truncate: bool = True) -> list[Any]:
    """Tokenize texts and preprocess decoded images (worker thread); bad items in place."""
    out: list[Any] = [None] * len(inputs)
    texts = []
    for i, x in enumerate(inputs):
        if isinstance(x, InferdError):
            out[i] = x
        elif isinstance(x, np.ndarray):
            try:
                out[i] = rt.prepare_image(x)
            except InvalidInput as e:  # an image the model's processor cannot take
                out[i] = InvalidInput(f"input[{i}]: {e.message}", "input")
        elif isinstance(x, str):
            if not x.strip():
                out[i] = InvalidInput(f"input[{i}] is empty", "input")
            else:
                texts.append((i, x))
        else:
            try:
                out[i] = rt.prepare_ids(x) if len(x) else InvalidInput(f"input[{i}] is empty", "input")
            except InvalidInput as e:
                out[i] = InvalidInput(f"input[{i}]: {e.message}", "input")
    if texts:
        for (i, _), enc in zip(texts, rt.prepare([x for _, x in texts], task)):
            out[i] = enc
    if not truncate:
        for i, enc in enumerate(out):
            if getattr(enc, "truncated", False):
                out[i] = InvalidInput(f"input[{i}] is longer than the model's limit of {rt.max_length} tokens "
                                      "and truncation is off", "input")
    return out
