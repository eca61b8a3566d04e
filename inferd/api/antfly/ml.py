"""Antfly face, tabular predictors: /ml/v1/predictors and /ml/v1/predict (the spec's examples
also show them under /ai/v1; both prefixes are served). /predict reads its body itself
(ml_body.py: JSON through orjson, or a .npy file) instead of through a pydantic model, which
was most of the cost of a 10,000-row request; the pydantic model here only documents the JSON
body in /openapi.json. Sections: wire models, pure converters, thin routes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
import numpy as np
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from inferd.api.antfly import ml_body
from inferd.api.deps import get_service
from inferd.api.fastjson import FastJSONResponse
from inferd.service import InferenceService, PredictResult
from inferd.service.tabular import MAX_ROWS


# ---- wire requests -------------------------------------------------------------------
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


# ---- wire <-> engine (pure functions) ------------------------------------------------
def predictor_list(entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"object": "list", "predictors": entries}


def predict_response(r: PredictResult) -> dict[str, Any]:
    """The response, for FastJSONResponse: orjson writes the float64 matrix straight from numpy
    (10,000 x 3 in ~1 ms, where `.tolist()` and the json module took ~12 ms); the values are
    finite (the service checks), so no NaN has to be spelled."""
    return {"model": r.model, "task": r.task,
            "predictions": np.ascontiguousarray(r.predictions, dtype=np.float64)}


# ---- routes --------------------------------------------------------------------------
router = APIRouter()


@router.get("/ml/v1/predictors")
@router.get("/ml/v1/models")
@router.get("/ai/v1/predictors")
async def predictors(svc: InferenceService = Depends(get_service)) -> dict:
    return predictor_list(svc.predictors())


@router.post("/ml/v1/predict", openapi_extra=PREDICT_OPENAPI)
@router.post("/ai/v1/predict", openapi_extra=PREDICT_OPENAPI)
async def predict(request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    req = ml_body.parse(request.headers.get("content-type"), await request.body(),
                        request.query_params.multi_items(), MAX_ROWS)
    result = await svc.predict(req.model, req.x)
    return FastJSONResponse(predict_response(result))
