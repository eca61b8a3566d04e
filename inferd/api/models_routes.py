"""Load control (llama-server's router routes): POST /models/load, POST /models/unload, and
GET /models/events, an SSE stream of what the server does with models: `downloading`
(bytes so far and total, per file), `loading`, `loaded`, `failed`, `unloaded`, `deleted`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.responses import StreamingResponse

from inferd.api.deps import get_service
from inferd.api.streaming import SSE_HEADERS
from inferd.service import InferenceService

router = APIRouter()


class ModelBody(BaseModel):
    model: str = Field(min_length=1, max_length=512)


@router.post("/models/load")
async def load(body: ModelBody, svc: InferenceService = Depends(get_service)) -> dict:
    spec = await svc.models_mgr.load(body.model)
    return {"success": True, "model": spec.name}


@router.post("/models/unload")
async def unload(body: ModelBody, svc: InferenceService = Depends(get_service)) -> dict:
    spec, was_loaded = await svc.models_mgr.unload(body.model)
    return {"success": True, "model": spec.name, "was_loaded": was_loaded}


@router.get("/models/events")
async def events(request: Request, svc: InferenceService = Depends(get_service)) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        yield ": connected\n\n"   # lets a client know it is subscribed before anything happens
        async for ev in svc.model_events():
            if await request.is_disconnected():
                return
            yield f"event: {ev['event']}\ndata: {json.dumps(ev, separators=(',', ':'))}\n\n"

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)
