"""Antfly wire <-> engine. Pure functions."""

from __future__ import annotations

from typing import Any, Callable

from inferd.api.antfly.schemas import ChunkConfig, ChunkRequest
from inferd.errors import InvalidInput
from inferd.kinds import KINDS, listed_in
from inferd.models import ModelSpec
from inferd.service import ChunkResult
from inferd.text.chunking import FixedConfig
from inferd.text.semantic import SEMANTIC, SemanticConfig


def models(specs: list[ModelSpec], backends: dict[str, bool], created: int, allow_downloads: bool,
           extras: Callable[[ModelSpec], dict[str, Any]] | None = None) -> dict[str, Any]:
    """`extras`: per-model state for its kind map entry (a generator's active LoRA adapter).
    The kinds listed, their `inputs` and their extra fields are the kinds table's (KindSpec
    `faces`, `inputs`, `catalog`); predictors are not listed here (they live under /ml/v1)."""
    out: dict[str, Any] = {"object": "list", "data": [], "allow_downloads": allow_downloads,
                           "backends": backends}
    listed = listed_in("antfly")
    for kind in listed:
        out[kind.plural] = {}
    for s in specs:
        if s.kind not in listed:
            continue
        ks = KINDS[s.kind]
        out["data"].append({"id": s.name, "object": "model", "created": created, "owned_by": "inferd",
                            "type": s.kind.value})
        out[s.kind.plural][s.name] = {"capabilities": sorted(s.capabilities),
                                      "inputs": ["text", "image"] if "image" in s.capabilities else list(ks.inputs),
                                      "format": s.format,
                                      **({"unsupported": s.manifest["unsupported"]} if s.manifest.get("unsupported")
                                         else {}),
                                      **(extras(s) if extras else {}),
                                      **(ks.catalog(s) if ks.catalog else {})}
    return out


def chunk_args(req: ChunkRequest) -> tuple[str, str, FixedConfig, float, SemanticConfig]:
    """-> (text, model, fixed config, threshold, semantic config)."""
    src = req.input if req.input is not None else req.text
    if src is None:
        raise InvalidInput("'input' is required", "input")
    text = src if isinstance(src, str) else src.text
    c = req.config
    model = c.model if "model" in c.model_fields_set or not req.model else req.model
    cfg = FixedConfig(target_tokens=c.text.target_tokens, overlap_tokens=c.text.overlap_tokens,
                      separator=c.text.separator, max_chunks=c.max_chunks)
    return text, model, cfg, c.threshold, semantic_config(c, model)


def semantic_config(c: ChunkConfig, model: str) -> SemanticConfig:
    """The `semantic` chunker's options: config.semantic, with max_tokens defaulting to
    config.text.target_tokens, overlap only where config.text.overlap_tokens is given (its
    default, 50, is the fixed chunker's), and config.threshold read as the similarity threshold
    when config.semantic sets neither threshold nor percentile. config.semantic given for
    another chunker is a 400, not ignored."""
    s = c.semantic
    if "semantic" in c.model_fields_set and model != SEMANTIC:
        raise InvalidInput(f"config.semantic applies to the '{SEMANTIC}' chunker, not '{model}'", "config.semantic")
    threshold = s.threshold
    if threshold is None and s.percentile is None and "threshold" in c.model_fields_set:
        threshold = c.threshold
    return SemanticConfig(embedder=s.embedder, threshold=threshold, percentile=s.percentile, window=s.window,
                          min_tokens=s.min_tokens, max_tokens=s.max_tokens or c.text.target_tokens,
                          overlap_tokens=c.text.overlap_tokens if "overlap_tokens" in c.text.model_fields_set else 0)


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
