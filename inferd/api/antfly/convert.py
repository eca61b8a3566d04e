"""Antfly wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any, Callable

from inferd.api.antfly.schemas import ChunkRequest
from inferd.errors import InvalidInput
from inferd.kinds import KINDS
from inferd.models import ModelKind, ModelSpec
from inferd.service import ChunkResult
from inferd.text.chunking import FixedConfig


def models(specs: list[ModelSpec], backends: dict[str, bool], created: int, allow_downloads: bool,
           extras: Callable[[ModelSpec], dict[str, Any]] | None = None) -> dict[str, Any]:
    """`extras`: per-model state for its kind map entry (a generator's active LoRA adapter)."""
    out: dict[str, Any] = {"object": "list", "data": [], "allow_downloads": allow_downloads,
                           "backends": backends}
    for kind in ModelKind:
        if kind is not ModelKind.PREDICTOR:
            out[kind.plural] = {}
    for s in specs:
        if s.kind is ModelKind.PREDICTOR:
            continue  # predictors live under /ml/v1
        out["data"].append({"id": s.name, "object": "model", "created": created, "owned_by": "inferd",
                            "type": s.kind.value})
        facts = KINDS[s.kind]  # its inputs and its own catalog fields (a rewriter's architecture, a voice's voices)
        out[s.kind.plural][s.name] = {"capabilities": sorted(s.capabilities),
                                      "inputs": (["text", "image"] if "image" in s.capabilities
                                                 else list(facts.inputs)), "format": s.format,
                                      **({"unsupported": s.manifest["unsupported"]} if s.manifest.get("unsupported")
                                         else {}),
                                      **(facts.catalog(s) if facts.catalog else {}),
                                      **(extras(s) if extras else {})}
    return out


def chunk_args(req: ChunkRequest) -> tuple[str, str, FixedConfig, float]:
    """-> (text, model, fixed config, threshold)."""
    src = req.input if req.input is not None else req.text
    if src is None:
        raise InvalidInput("'input' is required", "input")
    text = src if isinstance(src, str) else src.text
    c = req.config
    model = c.model if "model" in c.model_fields_set or not req.model else req.model
    cfg = FixedConfig(target_tokens=c.text.target_tokens, overlap_tokens=c.text.overlap_tokens,
                      separator=c.text.separator, max_chunks=c.max_chunks)
    return text, model, cfg, c.threshold


def chunk_response(r: ChunkResult) -> dict[str, Any]:
    return {"object": "list", "model": r.model, "cache_hit": r.cache_hit,
            "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": 0, "total_tokens": r.prompt_tokens},
            "data": [{"object": "chunk", "index": i, "id": i, "text": c.text, "start_char": c.start_char,
                      "end_char": c.end_char, "mime_type": "text/plain"} for i, c in enumerate(r.chunks)]}


def add_item_errors(out: dict[str, Any], errors: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """`error_policy: per_item`: the failed items' errors beside `data`, and the summary."""
    out["errors"] = errors
    out["summary"] = {"total": total, "succeeded": total - len(errors), "failed": len(errors)}
    return out
