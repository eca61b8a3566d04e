"""Ollama face: /api/embed and the legacy /api/embeddings. Sections: wire models, pure
converters, thin routes."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, Request
import numpy as np
from pydantic import BaseModel, ConfigDict
from starlette.responses import JSONResponse, Response

from inferd.api.deps import get_service
from inferd.api.fastjson import FastJSONResponse
from inferd.api.ollama.convert import keep_alive, tagged
from inferd.api.streaming import cancel_on_disconnect
from inferd.errors import ModelNotSupported
from inferd.models import ModelKind
from inferd.service import EmbedResult, InferenceService


# ---- wire requests -------------------------------------------------------------------
class EmbedRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = None
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None


class LegacyEmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    prompt: str = ""
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None

# ---- wire <-> engine (pure functions) ------------------------------------------------
def _dense(r: EmbedResult) -> None:
    if r.sparse:
        raise ModelNotSupported(f"model '{r.model}' is a sparse embedder; Ollama embeddings are dense "
                                "(use /ai/v1/embeddings)")


def _array(v: Any) -> np.ndarray:
    """float32, contiguous: what FastJSONResponse writes as a JSON array of numbers."""
    return np.ascontiguousarray(v, dtype=np.float32)


def embed_response(r: EmbedResult, total_ns: int, load_ns: int) -> dict[str, Any]:
    _dense(r)
    return {"model": tagged(r.model), "embeddings": [_array(v) for v in r.items], "total_duration": total_ns,
            "load_duration": load_ns, "prompt_eval_count": r.prompt_tokens}


def legacy_response(r: EmbedResult) -> dict[str, Any]:
    _dense(r)
    return {"embedding": _array(r.items[0])}

# ---- routes --------------------------------------------------------------------------
router = APIRouter(prefix="/api")


@router.post("/embed")
async def embed(req: EmbedRequest, request: Request, svc: InferenceService = Depends(get_service)) -> Response:
    t0 = time.perf_counter_ns()
    inputs = [req.input] if isinstance(req.input, str) else req.input
    r = await cancel_on_disconnect(request, svc.embed(req.model, inputs, dimensions=req.dimensions,
                                                      truncate=req.truncate, keep_alive=keep_alive(req.keep_alive)))
    return FastJSONResponse(embed_response(r, time.perf_counter_ns() - t0, int(r.load_seconds * 1e9)))


@router.post("/embeddings")
async def embeddings(req: LegacyEmbeddingsRequest, request: Request,
                     svc: InferenceService = Depends(get_service)) -> Response:
    if not req.prompt:  # Ollama answers an empty prompt with an empty vector
        svc.spec_for(req.model, ModelKind.EMBEDDER)
        return JSONResponse({"embedding": []})
    r = await cancel_on_disconnect(request, svc.embed(req.model, [req.prompt], keep_alive=keep_alive(req.keep_alive)))
    return FastJSONResponse(legacy_response(r))
