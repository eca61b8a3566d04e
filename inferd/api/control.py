"""Control and health routes (OpenAI-family envelope for errors)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from inferd import __version__
from inferd.api.deps import get_service
from inferd.service import InferenceService

router = APIRouter()


@router.get("/", response_class=PlainTextResponse)
@router.head("/", response_class=PlainTextResponse)
async def root() -> str:
    return "inferd is running"


@router.get("/health")
@router.get("/v1/health")
@router.get("/healthz")
async def health() -> dict:
    return {"status": "ok"}


@router.get("/readyz")
async def ready(svc: InferenceService = Depends(get_service)) -> dict:
    return {"status": "ready", "version": __version__, "models": len(svc.models())}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(svc: InferenceService = Depends(get_service)) -> str:
    return svc.metrics.render(svc.gauges())
