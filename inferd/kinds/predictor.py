"""Predictors: tabular models (tabular_model.json: linear, trees) on numpy (runtimes/tabular),
served under /ml/v1. They live in `<ml_dir>/<name>/`, not under models_dir, are checked at
discovery (the composition root passes the runtime's checker) and run on a thread per
request: no scheduler."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.kinds.spec import KindSpec
from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import PredictorHandle


def load(spec: ModelSpec, opts: RuntimeOptions) -> PredictorHandle:
    from inferd.runtimes.tabular import load as load_tabular
    from inferd.service.handles import PredictorHandle

    p = load_tabular(spec, opts)
    return PredictorHandle(p, size_bytes=p.size_bytes)


PREDICTOR: KindSpec[PredictorHandle] = KindSpec(
    ModelKind.PREDICTOR, {"tabular": load}, folder=None, formats=("tabular",), faces=frozenset(),
    inputs=("tabular",))
