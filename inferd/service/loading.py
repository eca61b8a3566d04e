"""The composition root's entry: settings -> RuntimeOptions, and spec -> its loader. Which
runtime serves which (kind, format) and how it is scheduled is each kind's module in
inferd/kinds (its KindSpec's loaders); this module looks them up in the kinds table and
materializes built-ins first. Runtimes know neither the registry nor the schedulers.

Runtime modules are imported on first load, so listing models or serving one kind never
imports the native libraries of another."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from inferd.config import Settings
from inferd.errors import ModelLoadFailed, NotImplementedYet
from inferd.kinds import KINDS
from inferd.models import ModelKind, ModelSpec
from inferd.registry.builtins import materialize
from inferd.runtimes.options import MIB, RuntimeOptions, engine_queue

Loader = Callable[[ModelSpec, RuntimeOptions], Any]


def runtime_options(settings: Settings) -> RuntimeOptions:
    """Built once per server from Settings: the only server configuration runtimes see."""
    return RuntimeOptions(threads=settings.n_threads, parallel=settings.parallel,
                          max_batch_tokens=settings.max_batch_tokens, max_batch_size=settings.max_batch_size,
                          prefer_quantized=settings.prefer_quantized, n_ctx=settings.ctx_size,
                          cache_dtype=settings.cache_dtype, n_gpu_layers=settings.n_gpu_layers,
                          cache_ram=settings.cache_ram * MIB,
                          mmproj_threads=settings.mmproj_n_threads, mmproj_gpu=settings.mmproj_gpu,
                          cache_dir=str(settings.cache_dir) if settings.cache_dir else None,
                          cache_disk_size=settings.cache_disk_size,
                          spec_auto=settings.spec_auto, spec_pool_entries=settings.spec_pool_entries,
                          max_waiting=engine_queue(settings.max_queued_requests, settings.parallel))


# (kind, format) -> loader, from the kinds table: tests and benchmarks load a generator with
# LOADERS[(ModelKind.GENERATOR, "gguf")](spec, options)
LOADERS: dict[tuple[ModelKind, str], Loader] = {(k, fmt): load for k, ks in KINDS.items()
                                                for fmt, load in ks.loaders.items()}


class Loaders:
    """The registry's loader lookup: spec -> a function that loads it into a handle. Without a
    `table`, the kinds table is read at each lookup (a kind registered later is served too)."""

    def __init__(self, options: RuntimeOptions, table: dict[tuple[ModelKind, str], Loader] | None = None):
        self.options = options
        self.table = table

    def __call__(self, spec: ModelSpec) -> Callable[[ModelSpec], Any]:
        if self.table is not None:
            load = self.table.get((spec.kind, spec.format))
        else:
            kind = KINDS.get(spec.kind)
            load = kind.loaders.get(spec.format) if kind is not None else None
        if load is None:
            raise NotImplementedYet(f"no runtime in this build serves {spec.kind.value} models in "
                                    f"{spec.format} format (model '{spec.name}')")
        return functools.partial(_load, load, options=self.options)


def _load(load: Loader, spec: ModelSpec, options: RuntimeOptions) -> Any:
    """Materialize a built-in's file (registry/builtins.py) first, then build the handle."""
    if spec.path is None and spec.source == "builtin":
        try:
            path = materialize(spec)
        except OSError as e:
            raise ModelLoadFailed(f"model '{spec.name}': {e}") from e
        if path is not None:
            spec = dataclasses.replace(spec, path=path)
    return load(spec, options)
