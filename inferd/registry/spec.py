"""ModelKind and ModelSpec live in the neutral base module inferd/models.py (runtimes import
them too); this name is kept for the registry's own callers."""

from inferd.models import ModelKind, ModelSpec

__all__ = ["ModelKind", "ModelSpec"]
