"""Ollama face: /api/..."""

from __future__ import annotations

import asyncio
from fastapi import APIRouter, Depends

from inferd import __version__
from inferd.api.deps import get_service
from inferd.api.ollama import convert
from inferd.api.ollama.schemas import ShowRequest
from inferd.service import InferenceService, model_info

router = APIRouter(prefix="/api")


@router.get("/version")
async def version() -> dict:
    return {"version": convert.OLLAMA_API_VERSION, "inferd_version": __version__}


@router.get("/tags")
async def tags(svc: InferenceService = Depends(get_service)) -> dict:
    return convert.tags(svc.models(*convert.ollama_kinds()), svc.started_at)


@router.get("/ps")
async def ps(svc: InferenceService = Depends(get_service)) -> dict:
    return convert.ps(svc.loaded())


@router.post("/show")
async def show(req: ShowRequest, svc: InferenceService = Depends(get_service)) -> dict:
    spec = svc.resolve_served(req.model or req.name, *convert.ollama_kinds())
    meta = await asyncio.to_thread(svc.gguf_metadata, spec)
    template = await svc.chat_template(spec)
    return convert.show(spec, svc.started_at, meta, template, model_info.capabilities(spec, template))
