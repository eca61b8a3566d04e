"""ReadingService: `/ai/v1/read`, OCR and document understanding on reader models.

Order of checks (each before anything more expensive): the request's own limits (400); a
capacity slot (503 when overloaded, nothing looked up or fetched: the spec puts admission
before model resolution); the served name (404 unknown, 400 wrong kind or unsupported
architecture); media admission (bytes: each image at most --max-media-bytes, the request at
most min(that x images, --max-read-batch-bytes, 16 MiB x --max-concurrent-requests);
headers, pixels: 400/413, scheduling/media.py); decoding; only then the model is loaded and the images join its batcher,
where they share batches with other requests' images."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from inferd.errors import InvalidInput, ModelNotSupported
from inferd.kinds import READER
from inferd.media.sources import MediaRef
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.scheduling.admission import Admission
from inferd.scheduling.media import MediaAdmission, decode_all
from inferd.service.core import Catalog
from inferd.service.verb import Verb, raise_first
from inferd.types import ReadItem, ReadOutput

MAX_IMAGES = 64           # images per /read request
MAX_TOKENS = 4096         # generated tokens per image (encoder-decoder readers)
MAX_PROMPT_CHARS = 4096


@dataclass
class ReadResult:
    model: str
    outputs: list[ReadOutput] = field(default_factory=list)
    load_seconds: float = 0.0

    @property
    def prompt_tokens(self) -> int:
        return sum(o.prompt_tokens for o in self.outputs)

    @property
    def completion_tokens(self) -> int:
        return sum(o.completion_tokens for o in self.outputs)


class ReadingService:
    def __init__(self, catalog: Catalog, registry: Registry, admission: Admission, media: MediaAdmission):
        self.catalog, self.registry, self.admission, self.media = catalog, registry, admission, media
        self.verb = Verb(READER, registry, admission)

    def spec_for(self, model: str | None) -> ModelSpec:
        spec = self.catalog.resolve(model, ModelKind.READER)
        reason = spec.manifest.get("unsupported")
        if reason:
            raise ModelNotSupported(f"reader '{spec.name}': {reason}")
        return spec

    async def read(self, model: str | None, refs: Sequence[MediaRef], prompt: str | None = None,
                   max_tokens: int = 256, keep_alive: float | None = None) -> ReadResult:
        if not refs:
            raise InvalidInput("'images' must hold at least one image", "images")
        if len(refs) > MAX_IMAGES:
            raise InvalidInput(f"at most {MAX_IMAGES} images per request (got {len(refs)})", "images")
        if not 1 <= max_tokens <= MAX_TOKENS:
            raise InvalidInput(f"max_tokens must be between 1 and {MAX_TOKENS}", "max_tokens")
        if prompt is not None and len(prompt) > MAX_PROMPT_CHARS:
            raise InvalidInput(f"prompt is longer than {MAX_PROMPT_CHARS} characters", "prompt")
        if prompt is not None and not prompt.strip():
            prompt = None
        budget = self.media.limits.read_budget(len(refs))
        # Admission before model resolution (spec 003): an overloaded server answers 503
        # without looking the model up, fetching or loading anything.
        async with self.verb.slot(self.media.weight(refs, per_two_images=True, budget=budget)):
            spec = self.spec_for(model)
            async with self.media.admit(refs, budget=budget, per_image=self.media.limits.per_image_bytes) as grant:
                images = await decode_all(grant)
                raise_first(images, per_item=False)
                items = [ReadItem(img, prompt, max_tokens, threading.Event()) for img in images]
                async with self.verb.hold(spec.name, keep_alive) as held:
                    h = held.handle
                    for it in items:
                        h.runtime.check(it)
                    try:
                        outs = await h.scheduler.submit(items, [1] * len(items))
                    except asyncio.CancelledError:  # the client left: a running decode stops at its next step
                        for it in items:
                            it.stop.set()
                        raise
        return ReadResult(spec.name, list(outs), held.load_seconds)
