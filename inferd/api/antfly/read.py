"""Antfly face: /ai/v1/read (OCR and document understanding). Sections: wire models, pure
converters, thin routes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect
from inferd.media.sources import MediaRef, parse_ref
from inferd.service import InferenceService
from inferd.service.reading import ReadResult


# ---- wire requests -------------------------------------------------------------------
class ReadImage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    url: str


class ReadRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    images: list[ReadImage] = Field(max_length=64)
    prompt: str | None = None
    max_tokens: int = 256


# ---- wire <-> engine (pure functions) ------------------------------------------------
def image_refs(req: ReadRequest) -> list[MediaRef]:
    return [parse_ref(im.url, f"images[{i}].url") for i, im in enumerate(req.images)]


def read_response(r: ReadResult) -> dict[str, Any]:
    data = []
    for i, o in enumerate(r.outputs):
        item: dict[str, Any] = {"object": "read", "index": i, "text": o.text}
        if o.fields:
            item["fields"] = o.fields
        if o.regions is not None:
            item["regions"] = [{"text": g.text, "bbox": [round(v, 2) for v in g.bbox], "confidence": g.confidence,
                                **({"label": g.label} if g.label else {}),
                                **({"points": [round(v, 2) for v in g.points]} if g.points else {})}
                               for g in o.regions]
        data.append(item)
    return {"object": "list", "data": data, "model": r.model,
            "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                      "total_tokens": r.prompt_tokens + r.completion_tokens, "cached_prompt_tokens": 0}}


# ---- routes --------------------------------------------------------------------------
router = APIRouter(prefix="/ai/v1")


@router.post("/read")
async def read(req: ReadRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    refs = image_refs(req)
    r = await cancel_on_disconnect(request, svc.read(req.model, refs, req.prompt, req.max_tokens))
    return JSONResponse(read_response(r))
