"""The Anthropic SDK's models.list / models.retrieve shapes for GET /v1/models[/{id}]: the
OpenAI face's routes answer in them when the request carries Anthropic's headers
(`anthropic-version`, which its SDKs always send, or `x-api-key`). Pure."""

from __future__ import annotations

import datetime
from typing import Any

from starlette.requests import Request

from inferd.errors import InvalidInput
from inferd.models import ModelSpec


def wants_anthropic(request: Request) -> bool:
    h = request.headers
    return "anthropic-version" in h or ("x-api-key" in h and "authorization" not in h)


def model_info(spec: ModelSpec, created: int) -> dict[str, Any]:
    at = datetime.datetime.fromtimestamp(created, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "model", "id": spec.name, "display_name": spec.name, "created_at": at, "lifecycle": "active"}


def model_page(specs: list[ModelSpec], created: int, limit: int = 20, after_id: str | None = None,
               before_id: str | None = None) -> dict[str, Any]:
    """One page, as Anthropic pages: `limit` (1..1000) entries after `after_id` or before
    `before_id`; has_more says whether more lie beyond (in the direction asked)."""
    if not 1 <= limit <= 1000:
        raise InvalidInput("limit must be between 1 and 1000", "limit")
    names = [s.name for s in specs]
    for key, value in (("after_id", after_id), ("before_id", before_id)):
        if value is not None and value not in names:
            raise InvalidInput(f"{key} {value!r} is no listed model", key)
    if before_id is not None:
        end = names.index(before_id)
        page, more = specs[max(0, end - limit):end], end - limit > 0
    else:
        begin = names.index(after_id) + 1 if after_id is not None else 0
        page, more = specs[begin:begin + limit], begin + limit < len(specs)
    data = [model_info(s, created) for s in page]
    return {"data": data, "has_more": more, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}
