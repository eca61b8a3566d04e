"""Antfly face: /ai/v1/extract (entities, relations, classifications, structures)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse

from inferd.api.antfly import extract_convert as convert
from inferd.api.antfly.extract_schemas import ExtractRequest
from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect
from inferd.service import InferenceService

router = APIRouter(prefix="/ai/v1")


@router.post("/extract")
async def extract(req: ExtractRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    per_item = req.error_policy == "per_item"
    r = await cancel_on_disconnect(request, svc.extraction.extract(
        req.model, convert.inputs_of(req), convert.schema_of(req), convert.options_of(req), per_item=per_item))
    return JSONResponse(convert.extract_response(req, r, per_item))
