"""Antfly /ml/v1 wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any

from inferd.service import PredictResult


def predictors(entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"object": "list", "predictors": entries}


def predict_response(r: PredictResult) -> dict[str, Any]:
    return {"model": r.model, "task": r.task, "predictions": r.predictions}
