"""Antfly /ml/v1: tabular predictors. The spec's examples also show the same routes under
/ai/v1 (/ai/v1/predictors, /ai/v1/predict); both prefixes are served.

/predict reads its body itself (api/antfly/ml_body.py: JSON through orjson, or a .npy file)
instead of through a pydantic model, which was most of the cost of a 10,000-row request."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from inferd.api.antfly import ml_body, ml_convert
from inferd.api.antfly.ml_schemas import PREDICT_OPENAPI
from inferd.api.deps import get_service
from inferd.service import InferenceService
from inferd.service.tabular import MAX_ROWS

router = APIRouter()


@router.get("/ml/v1/predictors")
@router.get("/ml/v1/models")
@router.get("/ai/v1/predictors")
async def predictors(svc: InferenceService = Depends(get_service)) -> dict:
    return ml_convert.predictors(svc.predictors())


@router.post("/ml/v1/predict", openapi_extra=PREDICT_OPENAPI)
@router.post("/ai/v1/predict", openapi_extra=PREDICT_OPENAPI)
async def predict(request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    req = ml_body.parse(request.headers.get("content-type"), await request.body(),
                        request.query_params.multi_items(), MAX_ROWS)
    result = await svc.predict(req.model, req.x)
    return Response(ml_convert.predict_response(result), media_type="application/json")
