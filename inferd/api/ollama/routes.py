"""Ollama face: /api/..."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from inferd import __version__
from inferd.api.deps import get_service
from inferd.api.ollama import convert
from inferd.api.ollama.schemas import ShowRequest
from inferd.service import InferenceService

router = APIRouter(prefix="/api")


@router.get("/version")
async def version() -> dict:
    return {"version": __version__}


@router.get("/tags")
async def tags(svc: InferenceService = Depends(get_service)) -> dict:
    return convert.tags(svc.models(*convert.OLLAMA_KINDS), svc.started_at)


@router.get("/ps")
async def ps(svc: InferenceService = Depends(get_service)) -> dict:
    return convert.ps(svc.loaded())


@router.post("/show")
async def show(req: ShowRequest, svc: InferenceService = Depends(get_service)) -> dict:
    spec = svc.resolve(req.model or req.name, *convert.OLLAMA_KINDS)
    return convert.show(spec, svc.started_at)
