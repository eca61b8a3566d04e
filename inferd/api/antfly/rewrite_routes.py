"""Antfly face: /ai/v1/rewrite (seq2seq rewriters)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse

from inferd.api.antfly import rewrite_convert as convert
from inferd.api.antfly.rewrite_schemas import RewriteRequest
from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect
from inferd.service import InferenceService

router = APIRouter(prefix="/ai/v1")


@router.post("/rewrite")
async def rewrite(req: RewriteRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    per_item = req.error_policy == "per_item"
    r = await cancel_on_disconnect(request, svc.rewriting.rewrite(req.model, req.inputs, convert.options(req),
                                                                  per_item=per_item, truncate=req.truncate))
    return JSONResponse(convert.rewrite_response(r, per_item))
