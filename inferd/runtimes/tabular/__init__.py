"""Tabular predictors: the IR (ir.py), its vectorised evaluator (trees.py, evaluate.py), and
importers from scikit-learn, XGBoost and LightGBM (importers/, used by `inferd ml import`).

Only numpy is needed to serve; the ML libraries are needed only to import their models."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.registry.discovery import TABULAR_FILE
from inferd.registry.spec import ModelSpec
from inferd.runtimes.tabular.evaluate import predict, to_matrix
from inferd.runtimes.tabular.trees import set_threads
from inferd.runtimes.tabular.ir import IRError, TabularModel, check_file, load_file, parse, summary

__all__ = ["IRError", "TabularModel", "TabularPredictor", "check_file", "load", "load_file", "model_file",
           "parse", "predict", "summary", "to_matrix"]


def model_file(path: Path) -> Path:
    """The tabular_model.json of a predictor folder (or the file itself)."""
    return path / TABULAR_FILE if path.is_dir() else path


@dataclass
class TabularPredictor:
    """A loaded predictor: what the registry keeps and the service calls."""

    name: str
    model: TabularModel

    @property
    def num_features(self) -> int:
        return self.model.metadata.num_features

    def predict(self, x: np.ndarray) -> np.ndarray:
        return predict(self.model, x)


def load(spec: ModelSpec, settings: Any = None) -> TabularPredictor:
    """Registry loader for (PREDICTOR, "tabular"). Raises IRError (a ValueError) if invalid."""
    if settings is not None and getattr(settings, "threads", None):
        set_threads(settings.threads)
    if spec.path is None:
        raise IRError(f"predictor {spec.name!r} has no file")
    model = load_file(model_file(spec.path))
    return TabularPredictor(name=spec.name, model=model)
