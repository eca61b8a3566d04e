"""Load control: POST /models/load and /models/unload (llama-server's router mode), the same
routes as /admin/models/load and /admin/models/unload (the console's Load and Unload buttons),
and GET /models/events, an SSE stream of what the server does with models: `downloading`
(bytes so far and total, per file), `loading`, `loaded`, `failed`, `unloaded`, `deleted`.

One implementation, one semantics for both paths (they used to differ):
  body      {"model": name}, 1 to 512 characters; other fields are ignored (llama-server's
            clients may send more)
  load      any kind; a served name, or with --allow-downloads a Hub name, fetched first as any
            request would (404 without the flag); the built-in `fixed` chunker is a 400; a model
            that fails to load is a 500 (and a `failed` event)
            -> {"success": true, "model": <the served name>, "loaded": true}
  unload    served models only (a name that would have to be downloaded is a 404); a busy model
            goes when its last request ends
            -> {"success": true, "model": <the served name>, "was_loaded": b, "unloaded": b}
`model` is always the served name (a pulled model's own, whatever spelling was sent); the
answer carries both families' fields (llama-server's `success`/`was_loaded`, the console's
`loaded`/`unloaded`)."""

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
@router.post("/admin/models/load")
async def load(body: ModelBody, svc: InferenceService = Depends(get_service)) -> dict:
    spec = await svc.load_model(body.model)
    return {"success": True, "model": spec.name, "loaded": True}


@router.post("/models/unload")
@router.post("/admin/models/unload")
async def unload(body: ModelBody, svc: InferenceService = Depends(get_service)) -> dict:
    spec, was_loaded = await svc.unload_model(body.model)
    return {"success": True, "model": spec.name, "was_loaded": was_loaded, "unloaded": was_loaded}


@router.get("/models/events")
async def events(request: Request, svc: InferenceService = Depends(get_service)) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        yield ": connected\n\n"   # lets a client know it is subscribed before anything happens
        async for ev in svc.model_events():
            if await request.is_disconnected():
                return
            yield f"event: {ev['event']}\ndata: {json.dumps(ev, separators=(',', ':'))}\n\n"

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)
