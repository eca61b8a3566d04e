"""`/ai/v1/rerank_multimodal` on a late-interaction image reranker (ColPali-style, the
reranker kind with the 'image' capability, runtimes/onnx/colvision.py): the query's token
vectors against each document's page-image vectors, scored by MaxSim.

Order, as for CLIP's cosine path (service/image_embed.py): request checks (400), a capacity
slot (503, nothing fetched), media admission of every image (400/413), decoding, then the
model loads. The query and the pages go to the model's batcher in one submission; its worker
runs the queries and the pages each as one pass of their graph, shared with other requests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from inferd.errors import CapabilityMissing, InferdError, InvalidInput
from inferd.media.sources import MediaRef
from inferd.models import ModelSpec
from inferd.scheduling.media import MediaAdmission, decode_all
from inferd.service.encoders import RerankResult
from inferd.service.handles import ImageRerankerRuntime
from inferd.service.input_limits import check_input_count
from inferd.service.verb import Verb, items_of, raise_first


def check_documents(spec: ModelSpec, documents: Sequence[Sequence[Any]]) -> list[list[MediaRef]]:
    """Each document's images. This model scores page images: a text part has no vectors of its
    own here (ColPali embeds text only as queries), so it is a 400 saying so, never dropped."""
    pages: list[list[MediaRef]] = []
    for j, d in enumerate(documents):
        if any(isinstance(p, str) and p.strip() for p in d):
            raise CapabilityMissing(f"documents[{j}] has a text part; reranker '{spec.name}' is a late-interaction "
                                    "image reranker (ColPali-style) and scores page images only: send text "
                                    "documents to a text reranker, or put the page's image")
        refs = [p for p in d if isinstance(p, MediaRef)]
        if not refs:
            raise InvalidInput(f"documents[{j}] has no image", f"documents[{j}].content")
        pages.append(refs)
    return pages


async def late_interaction_rerank(verb: Verb[Any], media: MediaAdmission, spec: ModelSpec, query: str,
                                  documents: Sequence[Sequence[Any]], max_inputs: int,
                                  keep_alive: float | None = None) -> RerankResult:
    if not query.strip():
        raise InvalidInput("'query' must not be empty", "query")
    if not documents:
        return RerankResult(spec.name, [], 0)
    check_input_count(len(documents), max_inputs, "documents")
    pages = check_documents(spec, documents)
    refs = [r for p in pages for r in p]
    async with verb.slot(media.weight(refs)):
        async with media.admit(refs, per_item=False) as grant:
            decoded = await decode_all(grant)
            raise_first(decoded, False)
            async with verb.hold(spec.name, keep_alive) as held:
                rt = cast(ImageRerankerRuntime, held.handle.runtime)
                where = [f"documents[{j}].content" for j, p in enumerate(pages) for _ in p]
                # decoded images are heavy to preprocess: on a worker thread
                ran = await verb.each(held.handle, lambda: _prepare(rt, query, decoded, where), None, False)
    vecs = items_of(ran)
    q, scores, k = vecs[0], [], 1
    for p in pages:
        scores.append(rt.score(q, vecs[k:k + len(p)]))
        k += len(p)
    return RerankResult(spec.name, scores, len(ran.prepared[0]))


def _prepare(rt: ImageRerankerRuntime, query: str, images: Sequence[Any], where: Sequence[str]) -> list[Any]:
    out: list[Any] = [rt.prepare_query(query)]
    for img, w in zip(images, where):
        if isinstance(img, InferdError):
            out.append(img)
            continue
        try:
            out.append(rt.prepare_image(np.asarray(img)))
        except InvalidInput as e:  # an image the model's processor cannot take
            out.append(InvalidInput(f"{w}: {e.message}", w))
    return out
