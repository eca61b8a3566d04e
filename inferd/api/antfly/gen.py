"""Antfly face, generation: /ai/v1/generate, /ai/v1/chat/completions, /ai/v1/generate/batch.

The single-request routes take the OpenAI chat request (api/openai/gen.py, engine controls
included) and answer in the ANTFLY dialect; this module adds the runtime selection fields and
the synchronous batch: each item validated on its own (a bad item fails alone), per-item
`response` xor `error`, and a summary. A failure after a stream started is an `event: error`
frame, and no [DONE]."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inferd.api import errors
from inferd.api.deps import get_service
from inferd.api.openai import gen as oai
from inferd.api.openai.dialect import ANTFLY
from inferd.api.openai.gen import ChatCompletionRequest
from inferd.api.infill import ping_interval
from inferd.api.streaming import cancel_on_disconnect, generate_or_stream, sse_response
from inferd.errors import InferdError, InvalidInput
from inferd.service import InferenceService
from inferd.types import GenerateRequest, Generation


# ---- wire requests -------------------------------------------------------------------
MAX_BATCH = 128


class GenerateBody(ChatCompletionRequest):
    """The OpenAI chat request (which carries the spec's engine controls: docs/engine.md) plus
    the runtime selection fields. A value inferd cannot honour is refused, never ignored."""

    # Runtime selection. A generator is a GGUF file run by llama.cpp, inferd's native runtime
    # (`native` and `llama_cpp` in the /ai/v1/models `backends` map); `onnx`, `cuda`, `metal`,
    # `xla` and `wasm` do not serve generators here, so naming one is a 400 listing these.
    backend: Literal["auto", "native", "llama.cpp", "llama_cpp"] = "auto"
    # llama.cpp runs every graph eagerly; there is no compiled mode to ask for.
    mode: Literal["auto", "eager"] = "auto"
    # `partitioned` is how llama.cpp always runs a graph: its backend scheduler splits it by
    # which device supports each op (all on the CPU in a CPU build). `none`: no compiled target.
    compiled_target: Literal["none", "partitioned"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _zero_values_are_unset(cls, data: Any) -> Any:
        """The spec's example body sends `top_p: 0` and `repetition_penalty: 0` (Go clients
        send a struct's zero value for a field they did not set); neither is a usable value
        (top_p 0 keeps no token, a penalty of 0 divides by zero), so both read as unset. An
        empty `grammar` or `draft_model` string is unset the same way."""
        if isinstance(data, dict):
            zeros = {k for k in _ZERO_UNSET if k in data and _is_zero(data[k])}
            if zeros:
                data = {k: v for k, v in data.items() if k not in zeros}
        return data


_ZERO_UNSET = ("top_p", "repetition_penalty", "repeat_penalty", "grammar", "draft_model")


def _is_zero(v: Any) -> bool:
    return v == "" if isinstance(v, str) else (isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0)


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    custom_id: str | None = None
    body: dict[str, Any]


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    mode: Literal["sync"] = "sync"
    requests: list[BatchItem] = Field(..., min_length=1, max_length=MAX_BATCH)


# ---- wire <-> engine (pure functions) ------------------------------------------------
_MEDIA_PARTS = {"image_url", "input_image", "image", "input_audio", "media", "file"}


class UnsupportedMultimodal(InvalidInput):
    """A batch item with image or other media parts (batch generation is text-only)."""


def _has_media(body: dict[str, Any]) -> bool:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False  # not a chat at all: validation names the problem
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") in _MEDIA_PARTS for p in content):
            return True
    return False


def chat_request(body: GenerateBody) -> GenerateRequest:
    """The OpenAI chat request, engine controls included (the runtime selection fields only
    name what inferd runs anyway)."""
    return oai.chat_request(body)


def chat_response(g: Generation) -> dict[str, Any]:
    out = oai.chat_response(g, ANTFLY)
    if g.speculation is not None:
        out["speculation"] = g.speculation
    return out


def batch_item(body: dict[str, Any], index: int) -> GenerateRequest | InferdError:
    """One item's engine request, or the error that fails this item alone."""
    if _has_media(body):
        return UnsupportedMultimodal(f"requests[{index}]: batch generation is text-only", "body.messages")
    try:
        parsed = GenerateBody.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        return InvalidInput(f"requests[{index}].body.{where}: {err.get('msg', 'invalid')}", where or None)
    try:
        req = chat_request(parsed)
    except InferdError as e:
        return e
    req.stream = False  # the batch is synchronous
    return req


def batch_requests(body: BatchRequest) -> list[GenerateRequest | InferdError]:
    return [batch_item(item.body, i) for i, item in enumerate(body.requests)]


def item_error(e: InferdError) -> dict[str, Any]:
    out = errors.item_error(e)
    if isinstance(e, UnsupportedMultimodal):
        out["code"] = "UNSUPPORTED_MULTIMODAL"
    return out


def batch_response(body: BatchRequest, results: list[Generation | InferdError]) -> dict[str, Any]:
    data = []
    for i, (item, r) in enumerate(zip(body.requests, results)):
        data.append({"custom_id": item.custom_id, "index": i,
                     "response": chat_response(r) if isinstance(r, Generation) else None,
                     "error": item_error(r) if isinstance(r, InferdError) else None})
    failed = sum(1 for d in data if d["error"] is not None)
    return {"object": "generate.batch", "data": data,
            "summary": {"total": len(data), "succeeded": len(data) - failed, "failed": failed}}


# ---- routes --------------------------------------------------------------------------
router = APIRouter(prefix="/ai/v1")


@router.post("/generate")
@router.post("/chat/completions")
async def generate(body: GenerateBody, request: Request, svc: InferenceService = Depends(get_service)):
    usage = bool(body.stream_options and body.stream_options.include_usage)
    return await generate_or_stream(
        request, svc, chat_request(body),
        stream=lambda s: sse_response(oai.chat_chunks(s, usage, ANTFLY), s.aclose, ANTFLY.name,
                                      ping=ping_interval(body.sse_ping_interval)),
        respond=chat_response)


@router.post("/generate/batch")
async def generate_batch(body: BatchRequest, request: Request, svc: InferenceService = Depends(get_service)) -> dict:
    results = await cancel_on_disconnect(request, svc.generate_batch(batch_requests(body)))
    return batch_response(body, results)
