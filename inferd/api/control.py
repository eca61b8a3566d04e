"""Control and health routes (OpenAI-family envelope for errors)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse

from inferd import __version__
from inferd.api.deps import get_service
from inferd.api.observe import health_response
from inferd.service import InferenceService

router = APIRouter()


@router.get("/health")
@router.get("/v1/health")
@router.get("/healthz")
async def health(request: Request):
    return await health_response(request, {"status": "ok"})


@router.get("/readyz")
async def ready(request: Request, svc: InferenceService = Depends(get_service)):
    return await health_response(request, {"status": "ready", "version": __version__, "models": len(svc.models())})


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(svc: InferenceService = Depends(get_service)) -> PlainTextResponse:
    obs = svc.observer  # type: ignore[attr-defined]
    # llama-server's names beside inferd's own, and its Process-Start-Time-Unix header
    text = svc.metrics.render(svc.gauges()) + obs.render() + obs.render_llamacpp()
    return PlainTextResponse(text, headers={"Process-Start-Time-Unix": str(int(svc.started_at))})
