"""OpenAI face: /v1/... (and the unversioned aliases llama-server clients use)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from inferd.api.anthropic import models as anthropic_models
from inferd.api.deps import get_service
from inferd.api.openai import convert
from inferd.errors import ModelNotFound
from inferd.models import ModelKind, ModelSpec
from inferd.service import InferenceService

router = APIRouter()


def _meta(svc: InferenceService, spec: ModelSpec) -> dict[str, Any]:
    """Context size and embedding dimensions (openai-server lists them): a GGUF model's
    header (cached), the slot context of a loaded generator. Blocking: called in a thread."""
    if spec.format != "gguf":
        return {}
    return convert.model_meta(svc.gguf_metadata(spec), svc.slot_context(spec))


@router.get("/v1/models")
@router.get("/models")
async def list_models(request: Request, limit: int = Query(20), after_id: str | None = None,
                      before_id: str | None = None, svc: InferenceService = Depends(get_service)) -> dict:
    if anthropic_models.wants_anthropic(request):  # the Anthropic SDK: its page of generators
        return anthropic_models.model_page(svc.models(ModelKind.GENERATOR), int(svc.started_at), limit, after_id,
                                           before_id)
    specs = svc.models(*convert.openai_kinds())
    meta = await asyncio.to_thread(lambda: {s.name: _meta(svc, s) for s in specs})
    out = convert.model_list(specs, int(svc.started_at), lambda s: {**svc.lora_info(s), **meta[s.name]})
    out["data"] += [convert.adapter_entry(name, spec, int(svc.started_at)) for name, spec in svc.adapter_models()]
    return out


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request, svc: InferenceService = Depends(get_service)) -> dict:
    if not model_id.strip():  # "/v1/models/%0A": the route's pattern leaves a lone newline out
        raise ModelNotFound(model_id)
    if anthropic_models.wants_anthropic(request):
        return anthropic_models.model_info(svc.resolve_served(model_id, ModelKind.GENERATOR), int(svc.started_at))
    adapter = dict(svc.adapter_models()).get(model_id) if svc.lookup(model_id) is None else None
    if adapter is not None:  # `base:adapter`, a LoRA served under its own name
        return convert.adapter_entry(model_id, adapter, int(svc.started_at))
    spec = svc.resolve_served(model_id, *convert.openai_kinds())  # not one --allow-downloads would fetch
    meta = await asyncio.to_thread(_meta, svc, spec)
    return convert.model_entry(spec, int(svc.started_at), {**svc.lora_info(spec), **meta})
