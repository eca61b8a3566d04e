"""Model registry: discovery on disk, served names, load on demand, keep-alive and LRU.
ModelKind and ModelSpec are the neutral base's (inferd/models.py)."""
