"""Antfly rewrite: wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any

from inferd.api.antfly.rewrite_schemas import RewriteRequest
from inferd.api.errors import classify, item_error
from inferd.errors import InferdError, InvalidInput
from inferd.service.rewriting import RewriteOptions, RewriteResult


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
    if per_item:
        out["errors"] = errors
        out["summary"] = {"total": len(r.items), "succeeded": len(data), "failed": len(errors)}
    return out
