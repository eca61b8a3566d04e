"""Antfly /ml/v1: tabular predictors. The spec's examples also show the same routes under
/ai/v1 (/ai/v1/predictors, /ai/v1/predict); both prefixes are served."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.responses import JSONResponse

from inferd.api.antfly import ml_convert
from inferd.api.antfly.ml_schemas import PredictRequest
from inferd.api.deps import get_service
from inferd.service import InferenceService

router = APIRouter()


@router.get("/ml/v1/predictors")
@router.get("/ml/v1/models")
@router.get("/ai/v1/predictors")
async def predictors(svc: InferenceService = Depends(get_service)) -> dict:
    return ml_convert.predictors(svc.predictors())


@router.post("/ml/v1/predict")
@router.post("/ai/v1/predict")
async def predict(req: PredictRequest, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    result = await svc.predict(req.model, req.input)
    # A JSONResponse skips FastAPI's generic encoder, which is slow on 10,000 rows of floats.
    return JSONResponse(ml_convert.predict_response(result))
