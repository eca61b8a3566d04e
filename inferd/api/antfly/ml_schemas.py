"""Antfly /ml/v1 wire request models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    # One row per sample, exactly num_features values each; null (or NaN) marks a missing value.
    input: list[list[float | None]]
