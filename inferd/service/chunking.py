"""Chunking verbs: the built-in `fixed` chunker (model-based chunkers build on this), the
built-in `semantic` one (service/semantic_chunking.py) and token-classifier chunkers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any
from inferd.errors import Cancelled, InvalidInput, ModelUnloaded, Overloaded
from inferd.models import ModelKind
from inferd.scheduling.admission import Admission
from inferd.service.core import Catalog
from inferd.service.encoders import EncoderService
from inferd.service.semantic_chunking import SemanticChunker, is_semantic
from inferd.text.cache import TTLCache
from inferd.text.chunking import Chunk, FixedConfig, count_tokens, fixed_chunks
from inferd.text.semantic import SemanticConfig

log = logging.getLogger("inferd.chunking")


@dataclass
class ChunkResult:
    model: str
    chunks: list[Chunk]
    prompt_tokens: int
    cache_hit: bool


CHUNK_CACHE_BYTES = 64 << 20


def chunk_cache_size(key: Hashable, chunks: Any) -> int:
    """Approximate bytes a cached chunking holds: its key text and every chunk (with the
    per-object overhead of a Chunk and its str)."""
    text = key[-1] if isinstance(key, tuple) else ""
    return len(text) + sum(len(c.text) + 120 for c in chunks) + 200


class ChunkingService:
    """/ai/v1/chunk: the built-in `fixed` chunker, or a model chunker's boundaries (through the
    encoder service), falling back to fixed chunking when the model fails; results cached."""

    def __init__(self, catalog: Catalog, admission: Admission, encoders: EncoderService,
                 cache: TTLCache | None = None):
        self.catalog, self.admission, self.encoders = catalog, admission, encoders
        self.semantic = SemanticChunker(catalog, encoders)
        self.cache = cache if cache is not None else TTLCache(
            ttl=120.0, max_items=1024, max_bytes=CHUNK_CACHE_BYTES, size=chunk_cache_size)

    async def chunk(self, text: str, model: str, cfg: FixedConfig, threshold: float = 0.5,
                    semantic: SemanticConfig | None = None) -> ChunkResult:
        """`semantic`: the options of the built-in `semantic` chunker (unused by the others)."""
        spec = self.catalog.resolve(model, ModelKind.CHUNKER, default="fixed")
        cfg.check()
        if not (0.0 <= threshold <= 1.0):
            raise InvalidInput("threshold must be between 0 and 1", "config.threshold")
        sem = (self.semantic.config(spec, semantic or SemanticConfig(max_tokens=cfg.target_tokens))
               if is_semantic(spec) else None)
        key = (spec.name, cfg, threshold, sem, text)
        hit = self.cache.get(key)
        if hit is not None:
            return ChunkResult(spec.name, hit, count_tokens(text), True)
        if spec.format == "builtin" and sem is None:
            async with self.admission.slot():
                chunks = await asyncio.to_thread(fixed_chunks, text, cfg)
        else:
            try:  # a model-based chunker; on failure, chunk the fixed way
                if sem is not None:  # its embedding requests take their own admission slots
                    chunks = await self.semantic.chunk(text, cfg, sem)
                else:
                    async with self.admission.slot():  # service/encoders.py
                        chunks = await self.encoders.model_chunks(spec, text, cfg, threshold)
            except (Cancelled, Overloaded, ModelUnloaded):
                raise
            except Exception as e:
                log.warning("chunker %s failed (%s); falling back to fixed chunking", spec.name, e)
                # Reported as "fixed" and not cached, so the model is tried again next time.
                chunks = await asyncio.to_thread(fixed_chunks, text, cfg)
                return ChunkResult("fixed", chunks, count_tokens(text), False)
        self.cache.put(key, chunks)
        return ChunkResult(spec.name, chunks, count_tokens(text), False)
