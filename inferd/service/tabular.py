"""Tabular predictor verbs (/ml/v1): the predictor catalog and batch prediction.

A request is admitted (admission control), its model is loaded on first use and kept by
the registry (keep-alive, LRU), and the vectorised evaluation runs on a worker thread so
the event loop never blocks on numpy."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, PayloadTooLarge
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.scheduling.admission import Admission
from inferd.service.core import Catalog
from inferd.service.handles import PredictorHandle, PredictorRuntime

MAX_ROWS = 10_000


@dataclass
class PredictResult:
    model: str
    task: str
    predictions: np.ndarray  # float64 [rows, num_outputs], all finite (encoded as JSON by the API layer)


Rows = np.ndarray | list[list[float | None]]  # a 2-D numeric matrix, or JSON rows (None = missing)


class TabularService:
    def __init__(self, catalog: Catalog, registry: Registry, admission: Admission):
        self.catalog, self.registry, self.admission = catalog, registry, admission
        self._predictor_info: dict[str, dict[str, Any]] = {}  # entries not checked at discovery

    def predictor_info(self, spec: ModelSpec) -> dict[str, Any]:
        """Catalog entry of one predictor: from discovery's check, else read once from its file.
        A file that has become unreadable is reported in the entry, not raised."""
        info = spec.manifest.get("tabular") or self._predictor_info.get(spec.name)
        if info is None:
            from inferd.runtimes.tabular import IRError, check_file, model_file

            try:
                info = check_file(model_file(spec.path)) if spec.path else {"error": "no model file"}
            except IRError as e:
                info = {"error": str(e)}
            self._predictor_info[spec.name] = info
        loaded = self.catalog.is_loaded(spec.name)
        return {**info, "format": spec.format, "source": spec.source, "loaded": loaded}

    def predictors(self) -> dict[str, dict[str, Any]]:
        return {s.name: self.predictor_info(s) for s in self.catalog.models(ModelKind.PREDICTOR)}

    async def predict(self, model: str, rows: Rows) -> PredictResult:
        spec = self.catalog.resolve(model, ModelKind.PREDICTOR)
        if len(rows) > MAX_ROWS:
            raise PayloadTooLarge(f"'input' has {len(rows)} rows; at most {MAX_ROWS} per request")
        async with self.admission.slot():
            async with self.registry.use(spec.name, [ModelKind.PREDICTOR]) as handle:
                assert isinstance(handle, PredictorHandle)
                return await asyncio.to_thread(_run, handle.runtime, rows)


def _run(predictor: PredictorRuntime, rows: Rows) -> PredictResult:
    from inferd.runtimes.tabular import to_matrix

    x = to_matrix(rows, predictor.num_features)
    y = predictor.predict(x)
    if not np.isfinite(y).all():  # e.g. an `exp` output overflowing: JSON cannot carry it
        row = int(np.argwhere(~np.isfinite(y))[0][0])
        raise InvalidInput(f"the prediction for input[{row}] is not a finite number (overflow)", f"input[{row}]")
    return PredictResult(model=predictor.name, task=predictor.task, predictions=y)
