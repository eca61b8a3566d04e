"""Runtimes: the only modules that import native inference libraries.

LOADERS maps (kind, format) to "module:function". Modules are imported on first load, so
listing models or serving one kind never imports the libraries of another."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from inferd.errors import NotImplementedYet
from inferd.registry.spec import ModelKind, ModelSpec

LOADERS: dict[tuple[ModelKind, str], str] = {}


def loader_for(spec: ModelSpec) -> Callable[[ModelSpec], Any]:
    target = LOADERS.get((spec.kind, spec.format))
    if target is None:
        raise NotImplementedYet(f"no runtime in this build serves {spec.kind.value} models in "
                                f"{spec.format} format (model '{spec.name}')")
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)
