"""InferenceService: the verbs every API face calls. It owns the registry and admission
control; faces convert wire formats to these calls and back, and know nothing else.

Verbs are grouped by domain in mixins (one module each); CoreService holds the state."""

from __future__ import annotations

from inferd.service.chunking import ChunkingVerbs, ChunkResult
from inferd.service.core import CoreService, available_backends, discover_all
from inferd.text.cache import TTLCache


class InferenceService(ChunkingVerbs, CoreService):
    def __post_init__(self) -> None:
        self._chunk_cache = TTLCache(ttl=120.0, max_items=1024)


__all__ = ["InferenceService", "ChunkResult", "available_backends", "discover_all"]
