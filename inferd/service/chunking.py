"""Chunking verbs: the built-in `fixed` chunker (model-based chunkers build on this)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from inferd.errors import Cancelled, InvalidInput, Overloaded
from inferd.registry.spec import ModelKind
from inferd.text.cache import TTLCache
from inferd.text.chunking import Chunk, FixedConfig, count_tokens, fixed_chunks

log = logging.getLogger("inferd.chunking")


@dataclass
class ChunkResult:
    model: str
    chunks: list[Chunk]
    prompt_tokens: int
    cache_hit: bool


CHUNK_CACHE_BYTES = 64 << 20


def chunk_cache_size(key: tuple, chunks: list[Chunk]) -> int:
    """Approximate bytes a cached chunking holds: its key text and every chunk (with the
    per-object overhead of a Chunk and its str)."""
    return len(key[-1]) + sum(len(c.text) + 120 for c in chunks) + 200


class ChunkingVerbs:
    _chunk_cache: TTLCache  # set by InferenceService.__post_init__
    model_chunks: Any       # EncoderVerbs.model_chunks (service/encoders.py)

    async def chunk(self, text: str, model: str, cfg: FixedConfig, threshold: float = 0.5) -> ChunkResult:
        spec = self.registry.resolve(model or "fixed", [ModelKind.CHUNKER])
        cfg.check()
        if not (0.0 <= threshold <= 1.0):
            raise InvalidInput("threshold must be between 0 and 1", "config.threshold")
        key = (spec.name, cfg, threshold, text)
        hit = self._chunk_cache.get(key)
        if hit is not None:
            return ChunkResult(spec.name, hit, count_tokens(text), True)
        async with self.admission.slot():
            if spec.format == "builtin":
                chunks = await asyncio.to_thread(fixed_chunks, text, cfg)
            else:
                try:  # a model-based chunker (service/encoders.py); on failure, chunk the fixed way
                    chunks = await self.model_chunks(spec, text, cfg, threshold)
                except (Cancelled, Overloaded):
                    raise
                except Exception as e:
                    log.warning("chunker %s failed (%s); falling back to fixed chunking", spec.name, e)
                    # Reported as "fixed" and not cached, so the model is tried again next time.
                    chunks = await asyncio.to_thread(fixed_chunks, text, cfg)
                    return ChunkResult("fixed", chunks, count_tokens(text), False)
        self._chunk_cache.put(key, chunks)
        return ChunkResult(spec.name, chunks, count_tokens(text), False)
