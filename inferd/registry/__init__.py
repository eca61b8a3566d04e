"""Model registry: discovery on disk, served names, load on demand, keep-alive and LRU."""

from inferd.registry.spec import ModelKind, ModelSpec

__all__ = ["ModelKind", "ModelSpec"]
