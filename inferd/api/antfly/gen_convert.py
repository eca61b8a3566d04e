"""Antfly generation wire <-> engine. The single-request routes are OpenAI chat with
Antfly's additions (api/openai/gen_convert.py with the ANTFLY dialect); this module adds the
synchronous batch: per-item validation, per-item `response` xor `error`, and a summary."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from inferd.api.antfly.gen_schemas import BatchRequest, GenerateBody
from inferd.api import errors
from inferd.api.openai import gen_convert as oai
from inferd.api.openai.dialect import ANTFLY
from inferd.errors import InferdError, InvalidInput
from inferd.types import Generation, GenerateRequest

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
