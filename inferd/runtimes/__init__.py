"""Runtimes: the leaves, and the only modules that import native inference libraries.

Each satisfies a Protocol of the schedulers or the service structurally (see
inferd/service/handles.py) and imports nothing from inferd.service, inferd.registry,
inferd.scheduling or inferd.api. Which runtime serves which (kind, format) is decided by the
composition root, inferd/service/loading.py."""
