"""Antfly /ml/v1 wire request models. /predict parses its body in ml_body.py (fast path); the
pydantic model here only documents the JSON body in /openapi.json."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    # One row per sample, exactly num_features values each; null (or NaN) marks a missing value.
    input: list[list[float | None]]


PREDICT_OPENAPI: dict[str, Any] = {
    "parameters": [{"name": "model", "in": "query", "required": False, "schema": {"type": "string"},
                    "description": "the predictor, for an application/x-npy body only"}],
    "requestBody": {"required": True, "content": {
        "application/json": {"schema": PredictRequest.model_json_schema()},
        "application/x-npy": {"schema": {"type": "string", "format": "binary"}},
    }},
}
