"""Antfly face: /ai/v1/... (and /ml/v1/... for tabular predictors)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from inferd.api.antfly import convert
from inferd.api.antfly.schemas import ChunkRequest
from inferd.api.deps import get_service
from inferd.service import InferenceService

router = APIRouter()


@router.get("/ai/v1/models")
@router.get("/api/models")  # the spec's /transcribe section points clients here (Ollama has no such route)
async def models(svc: InferenceService = Depends(get_service)) -> dict:
    return convert.models(svc.models(), svc.backends, int(svc.started_at), allow_downloads=svc.settings.allow_downloads,
                          extras=svc.model_state)


@router.post("/ai/v1/chunk")
async def chunk(req: ChunkRequest, svc: InferenceService = Depends(get_service)) -> dict:
    text, model, cfg, threshold, semantic = convert.chunk_args(req)
    return convert.chunk_response(await svc.chunk(text, model, cfg, threshold, semantic))
