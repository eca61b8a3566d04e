"""Antfly /read: wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any

from inferd.api.antfly.read_schemas import ReadRequest
from inferd.media.sources import MediaRef, parse_ref
from inferd.service.reading import ReadResult


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
                                **({"label": g.label} if g.label else {})} for g in o.regions]
        data.append(item)
    return {"object": "list", "data": data, "model": r.model,
            "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                      "total_tokens": r.prompt_tokens + r.completion_tokens, "cached_prompt_tokens": 0}}
