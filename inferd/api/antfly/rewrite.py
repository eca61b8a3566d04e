"""Antfly face: /ai/v1/rewrite (seq2seq rewriters). Sections: wire model, pure converters,
thin route."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from inferd.api.antfly.convert import add_item_errors
from inferd.api.deps import get_service
from inferd.api.errors import classify, item_error
from inferd.api.streaming import cancel_on_disconnect
from inferd.errors import InferdError, InvalidInput
from inferd.service import InferenceService
from inferd.service.rewriting import RewriteOptions, RewriteResult


# ---- wire requests -------------------------------------------------------------------
class RewriteRequest(BaseModel):
    # Unknown fields are refused: a misspelt option (num_beam) must not silently decode greedily.
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    inputs: list[str]
    max_tokens: int | None = Field(None, ge=1)
    num_beams: int | None = Field(None, ge=1)
    num_return_sequences: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    error_policy: Literal["fail_fast", "per_item"] = "fail_fast"
    truncate: bool = True


# ---- wire <-> engine (pure functions) ------------------------------------------------
def options(req: RewriteRequest) -> RewriteOptions:
    return RewriteOptions(max_tokens=req.max_tokens, num_beams=req.num_beams, num_return_sequences=req.num_return_sequences,
                   temperature=req.temperature, top_p=req.top_p, seed=req.seed)


def _item_error(index: int, e: InferdError) -> dict[str, Any]:
    stage = "validate" if isinstance(e, InvalidInput) else "inference"
    return {"index": index, **item_error(e), "stage": stage, "status": classify(e)[0]}


def rewrite_response(r: RewriteResult, per_item: bool) -> dict[str, Any]:
    data, errors = [], []
    for i, it in enumerate(r.items):
        if it.error is not None:
            errors.append(_item_error(i, it.error))
            continue
        entry: dict[str, Any] = {"object": "rewrite", "index": i, "texts": it.texts}
        if it.truncated:
            entry["truncated"] = True
        data.append(entry)
    p, c = r.prompt_tokens, r.completion_tokens
    out: dict[str, Any] = {"object": "list", "data": data, "model": r.model,
                           "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                                     "cached_prompt_tokens": 0}}
    return add_item_errors(out, errors, len(r.items)) if per_item else out


# ---- routes --------------------------------------------------------------------------
router = APIRouter(prefix="/ai/v1")


@router.post("/rewrite")
async def rewrite(req: RewriteRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    per_item = req.error_policy == "per_item"
    r = await cancel_on_disconnect(request, svc.rewrite(req.model, req.inputs, options(req),
                                                                  per_item=per_item, truncate=req.truncate))
    return JSONResponse(rewrite_response(r, per_item))
