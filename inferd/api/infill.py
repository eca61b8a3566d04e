"""llama-server's POST /infill (code infilling for editor plugins: llama.vscode, minuet,
continue), in three sections: the wire request (llama-server's /completion sampling fields
with its defaults, plus input_prefix / input_suffix / input_extra / prompt); wire <-> engine
(pure); the thin route. The prompt itself is built from the model's FIM tokens by the
service (service/fim.py). The stream is llama-server's: `data: {content, tokens, stop:
false}` per piece and a last frame with `stop: true` and the totals; no `[DONE]`.

The OpenAI-family error envelope, as llama-server answers errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from inferd.api.deps import get_service
from inferd.api.streaming import KEEPALIVE_SECONDS, generate_or_stream, sse_response
from inferd.service import InferenceService
from inferd.types import EngineControls, Generation, GenerateRequest, Infill, LoraRef, SamplingParams, Usage


# ---- wire request -----------------------------------------------------------------------
class ExtraChunk(BaseModel):
    """One repository context chunk (llama-server: a missing filename is "tmp")."""

    model_config = ConfigDict(extra="forbid")
    filename: str = Field("tmp", max_length=4096)
    text: str


class LoraEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int = Field(ge=0)
    scale: float


class InfillRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[ExtraChunk] = Field(default_factory=list, max_length=1024)
    prompt: str = ""
    n_predict: int = Field(-1, ge=-1)
    max_tokens: int | None = Field(None, ge=0)  # the OpenAI name some plugins send
    # llama-server's defaults (README, /completion options)
    temperature: float = Field(0.8, ge=0.0, le=2.0)
    top_k: int = Field(40, ge=0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    repeat_penalty: float = Field(1.0, gt=0.0)
    repeat_last_n: int = Field(64, ge=0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    seed: int = -1
    stop: list[str] = Field(default_factory=list)
    stream: bool = False
    ignore_eos: bool = False
    cache_prompt: bool = True
    return_tokens: bool = False
    return_progress: bool = False
    sse_ping_interval: float | None = None  # seconds; -1 disables the keep-alive comments
    lora: list[LoraEntry] | None = None


# ---- wire <-> engine (pure) -----------------------------------------------------------------
def lora_refs(entries: list[LoraEntry] | None) -> list[LoraRef] | None:
    return None if entries is None else [LoraRef(id=e.id, scale=e.scale) for e in entries]


def infill_request(body: InfillRequest) -> GenerateRequest:
    n = body.max_tokens if body.max_tokens is not None else (None if body.n_predict < 0 else body.n_predict)
    sampling = SamplingParams(temperature=body.temperature, top_k=body.top_k, top_p=body.top_p, min_p=body.min_p,
                              repetition_penalty=body.repeat_penalty, penalty_last_n=body.repeat_last_n,
                              presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
                              seed=None if body.seed < 0 else body.seed, ignore_eos=body.ignore_eos)
    return GenerateRequest(
        model=body.model or "", max_tokens=n, stop=[s for s in body.stop if s], sampling=sampling,
        stream=body.stream, clamp_to_context=True, engine=EngineControls(prompt_cache=body.cache_prompt),
        infill=Infill(prefix=body.input_prefix, suffix=body.input_suffix, prompt=body.prompt,
                      extra=[(c.filename, c.text) for c in body.input_extra]),
        infill_param="input_suffix", lora=lora_refs(body.lora), return_progress=body.return_progress)


def ping_interval(value: float | None) -> float | None:
    """llama-server's sse_ping_interval: None the server's, <= 0 (-1) none."""
    if value is None:
        return KEEPALIVE_SECONDS
    return value if value > 0 else None


def stop_type(reason: str) -> str:
    return {"length": "limit"}.get(reason, "eos")


def timings(u: Usage) -> dict[str, Any]:
    """llama-server's `timings` of a finished completion."""
    gen, pre = u.generation_seconds, u.prompt_seconds
    n_prompt = max(0, u.prompt_tokens - u.cached_prompt_tokens)
    return {"cache_n": u.cached_prompt_tokens, "prompt_n": n_prompt, "prompt_ms": round(pre * 1e3, 3),
            "prompt_per_second": round(n_prompt / pre, 3) if pre > 0 else 0.0,
            "predicted_n": u.completion_tokens, "predicted_ms": round(gen * 1e3, 3),
            "predicted_per_second": round((u.completion_tokens - 1) / gen, 3) if gen > 0 else 0.0}


def final_fields(model: str, reason: str, u: Usage, n_predict: int) -> dict[str, Any]:
    return {"model": model, "stop_type": stop_type(reason), "stopping_word": "",
            "tokens_predicted": u.completion_tokens, "tokens_evaluated": u.prompt_tokens,
            "tokens_cached": u.cached_prompt_tokens, "truncated": False, "timings": timings(u),
            "generation_settings": {"n_predict": n_predict}}


def infill_response(g: Generation, body: InfillRequest) -> dict[str, Any]:
    return {"index": 0, "content": g.text, "tokens": g.tokens if body.return_tokens else [], "stop": True,
            "id_slot": -1, "prompt": "", **final_fields(g.model, g.finish_reason, g.usage, body.n_predict)}


def progress(p: tuple[int, int, int, float]) -> dict[str, Any]:
    total, cache, processed, ms = p
    return {"total": total, "cache": cache, "processed": processed, "time_ms": ms}


async def infill_chunks(stream: Any, body: InfillRequest) -> AsyncIterator[dict[str, Any]]:
    async for d in stream:
        if d.progress is not None:
            yield {"index": 0, "content": "", "tokens": [], "stop": False, "prompt_progress": progress(d.progress)}
            continue
        if d.finish_reason is None:
            if d.text or d.tokens:
                yield {"index": 0, "content": d.text, "tokens": d.tokens, "stop": False}
            continue
        u = d.usage or Usage()
        yield {"index": 0, "content": d.text, "tokens": d.tokens, "stop": True,
               **final_fields(stream.model, d.finish_reason, u, body.n_predict)}


# ---- route --------------------------------------------------------------------------------
router = APIRouter()


@router.post("/infill")
async def infill(body: InfillRequest, request: Request, svc: InferenceService = Depends(get_service)):
    return await generate_or_stream(
        request, svc, infill_request(body),
        stream=lambda s: sse_response(infill_chunks(s, body), s.aclose, "openai", done=False,
                                      ping=ping_interval(body.sse_ping_interval)),
        respond=lambda g: infill_response(g, body))
