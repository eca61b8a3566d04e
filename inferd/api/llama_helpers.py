"""llama-server's helper routes (OpenAI-family error envelope): GET/POST /props, POST
/apply-template, GET/POST /lora-adapters. inferd serves several models where llama-server
serves one: each route takes `?model=` (llama-server's router mode), which may be omitted
when one generator is served. Wire shapes and pure converters, then the thin routes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query
from pydantic import BaseModel, ConfigDict

from inferd.api.deps import get_service
from inferd.api.infill import InfillRequest, LoraEntry
from inferd.api.openai.gen import ChatMessage, check_roles
from inferd.errors import InvalidInput
from inferd.service import InferenceService
from inferd.service.llama_props import Props
from inferd.types import LoraRef

router = APIRouter()


class ApplyTemplateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


# What /infill (and so llama-server's /completion) does when a request sets nothing.
_DEFAULTS = InfillRequest.model_validate({})


def default_params(p: Props) -> dict[str, Any]:
    d = _DEFAULTS
    return {"n_predict": d.n_predict, "seed": 4294967295, "temperature": d.temperature, "top_k": d.top_k,
            "top_p": d.top_p, "min_p": d.min_p, "typical_p": 1.0, "repeat_last_n": d.repeat_last_n,
            "repeat_penalty": d.repeat_penalty, "presence_penalty": d.presence_penalty,
            "frequency_penalty": d.frequency_penalty, "stop": [], "max_tokens": d.n_predict, "n_keep": 0,
            "ignore_eos": d.ignore_eos, "stream": d.stream, "n_probs": 0, "min_keep": 0, "grammar": "",
            "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"], "lora": p.lora}


def props_body(p: Props) -> dict[str, Any]:
    modalities = {"vision": p.vision, "audio": False}
    out: dict[str, Any] = {
        "default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": p.n_ctx, "speculative": False,
                                        "is_processing": p.busy_slots > 0, "params": default_params(p)},
        "total_slots": p.total_slots, "model_path": p.model_path, "model_alias": p.model,
        "chat_template": p.chat_template, "chat_template_caps": {}, "modalities": modalities,
        "build_info": p.build_info, "is_sleeping": False}
    if p.media_marker is not None:
        out["media_marker"] = p.media_marker
    return out


@router.get("/props")
async def get_props(model: str | None = Query(None), svc: InferenceService = Depends(get_service)) -> dict:
    return props_body(await svc.props(model))


@router.post("/props")
async def post_props(body: dict[str, Any] = Body(...), model: str | None = Query(None),
                     svc: InferenceService = Depends(get_service)) -> dict:
    """llama-server's POST /props changes no property yet ("None yet" in its README); a
    property named here is refused, never ignored."""
    svc.generator_spec(model)  # 404 for an unknown model, as the GET
    if body:
        name = sorted(body)[0]
        raise InvalidInput(f"property {name!r} cannot be changed: POST /props changes none yet", name)
    return {"success": True}


@router.post("/apply-template")
async def apply_template(body: ApplyTemplateRequest, svc: InferenceService = Depends(get_service)) -> dict:
    check_roles(body.messages)
    prompt = await svc.apply_template(body.model, [m.model_dump(exclude_none=True) for m in body.messages],
                                      dict(body.chat_template_kwargs or {}), body.tools)
    return {"prompt": prompt}


@router.get("/lora-adapters")
async def lora_adapters(model: str | None = Query(None), svc: InferenceService = Depends(get_service)) -> list:
    _spec, table = svc.lora_adapters(model)
    return table


@router.post("/lora-adapters")
async def set_lora_adapters(body: list[LoraEntry], model: str | None = Query(None),
                            svc: InferenceService = Depends(get_service)) -> dict:
    """The global scales (the default set of requests without `lora`); adapters left out are 0."""
    await svc.set_lora_scales(model, [LoraRef(id=e.id, scale=e.scale) for e in body])
    return {"success": True}
