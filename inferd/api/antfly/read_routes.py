"""Antfly face: /ai/v1/read (OCR and document understanding)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse

from inferd.api.antfly import read_convert as convert
from inferd.api.antfly.read_schemas import ReadRequest
from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect
from inferd.service import InferenceService

router = APIRouter(prefix="/ai/v1")


@router.post("/read")
async def read(req: ReadRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    refs = convert.image_refs(req)
    r = await cancel_on_disconnect(request, svc.read(req.model, refs, req.prompt, req.max_tokens))
    return JSONResponse(convert.read_response(r))
