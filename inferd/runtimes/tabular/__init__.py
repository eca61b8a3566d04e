"""Tabular predictors: the IR (ir.py), its vectorised evaluator (trees.py, evaluate.py), and
importers from scikit-learn, XGBoost and LightGBM (importers/, used by `inferd ml import`).

Only numpy is needed to serve; the ML libraries are needed only to import their models."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferd.models import ModelSpec, tabular_file
from inferd.runtimes.options import RuntimeOptions
from inferd.runtimes.tabular.evaluate import predict, to_matrix
from inferd.runtimes.tabular.trees import set_threads
from inferd.runtimes.tabular.ir import IRError, TabularModel, check_file, load_file, parse, summary

__all__ = ["IRError", "TabularModel", "TabularPredictor", "check_file", "load", "load_file", "model_file",
           "parse", "predict", "summary", "to_matrix"]


def model_file(path: Path) -> Path:
    """The tabular_model.json of a predictor folder (or the file itself)."""
    return tabular_file(path)


@dataclass
class TabularPredictor:
    """A loaded predictor: what the registry keeps and the service calls."""

    name: str
    model: TabularModel
    size_bytes: int = 0

    @property
    def num_features(self) -> int:
        return self.model.metadata.num_features

    @property
    def task(self) -> str:
        return self.model.metadata.task

    def predict(self, x: np.ndarray) -> np.ndarray:
        return predict(self.model, x)


def load(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions()) -> TabularPredictor:
    """(PREDICTOR, "tabular"). Raises IRError (a ValueError) if invalid."""
    set_threads(opts.threads)
    if spec.path is None:
        raise IRError(f"predictor {spec.name!r} has no file")
    model = load_file(model_file(spec.path))
    return TabularPredictor(name=spec.name, model=model, size_bytes=model_file(spec.path).stat().st_size)
