"""Ollama face, generation: /api/chat and /api/generate (NDJSON streams by default), in
sections: the wire requests (unknown fields and options are ignored, as Ollama does: it
logs them); wire <-> engine (pure functions, plus async generators mapping a
GenerationStream's deltas to NDJSON objects); a model's own defaults as Ollama applies its
Modelfile (`options`, the PARAMETER lines of a pulled model, under the request's options,
and its `system` prompt when the request brings none); the thin routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
import math
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from inferd.api.deps import get_service
from inferd.api.infill import LoraEntry, lora_refs
from inferd.api.ollama.convert import iso, keep_alive, tagged
from inferd.api.streaming import generate_or_stream, ndjson_response
from inferd.chat.reasoning import requested_thinking
from inferd.errors import InvalidInput
from inferd.models import ModelSpec
from inferd.service import InferenceService
from inferd.types import ChatOptions, Delta, GenerateRequest, Generation, Infill, SamplingParams, TokenLogprob, Usage


# ---- wire requests -------------------------------------------------------------------
class OllamaMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # tool_calls, tool_name, ... reach the template
    role: str
    content: str | None = ""
    images: list[str] | None = None
    thinking: str | None = None  # output-only: never replayed into the prompt


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[OllamaMessage] = []
    stream: bool = True
    format: str | dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None  # GenAIServer's extension
    think: bool | str | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    lora: list[LoraEntry] | None = None  # llama-server's per-request LoRA set (an inferd extension here)


class GenerateBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    stream: bool = True
    raw: bool = False
    format: str | dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None
    images: list[str] | None = None
    think: bool | str | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    lora: list[LoraEntry] | None = None
    # GenAIServer takes tools on /api/chat only; here they are a 400 naming them, not dropped.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None


# ---- wire <-> engine (pure functions) ------------------------------------------------
# Ollama's defaults when neither the request nor a Modelfile says otherwise.
DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "repeat_penalty": 1.1,
            "repeat_last_n": 64, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def _num(options: dict[str, Any], key: str, kind: type, default: Any = None) -> Any:
    v = options.get(key, default)
    if v is None:
        return None
    # JSON may carry 1e400 (inf), NaN or a 400-digit integer; none of them is a usable option.
    ok = not isinstance(v, bool) and (isinstance(v, int) or isinstance(v, float) and math.isfinite(v)) \
        and abs(v) < 2 ** 63 and (kind is float or float(v).is_integer())
    if not ok:
        what = f"a{'n integer' if kind is int else ' number'}"
        if not isinstance(v, bool) and isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) \
                and abs(v) >= 2 ** 63:
            what += " between -(2^63-1) and 2^63-1"
        raise InvalidInput(f"options.{key} must be {what}", f"options.{key}")
    return kind(v)


def options_to_request(options: dict[str, Any] | None) -> dict[str, Any]:
    """Ollama `options` -> GenerateRequest fields (sampling, max_tokens, stop, num_ctx). The
    load-time options (num_gpu, num_thread, num_batch, main_gpu, use_mmap, numa) are the
    server's settings here, not a request's, and pass unread, as do num_keep and penalize_newline."""
    o = dict(options or {})
    stop = o.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise InvalidInput("options.stop must be a string or a list of strings", "options.stop")
    n_predict = _num(o, "num_predict", int)
    num_ctx = _num(o, "num_ctx", int)
    if num_ctx is not None and num_ctx < 1:
        raise InvalidInput("options.num_ctx must be >= 1", "options.num_ctx")
    seed = _num(o, "seed", int)
    typical_p = _num(o, "typical_p", float, 1.0)
    if not 0.0 < typical_p <= 1.0:
        raise InvalidInput("options.typical_p must be > 0 and <= 1", "options.typical_p")
    sp = SamplingParams(
        temperature=_num(o, "temperature", float, DEFAULTS["temperature"]),
        top_k=_num(o, "top_k", int, DEFAULTS["top_k"]), top_p=_num(o, "top_p", float, DEFAULTS["top_p"]),
        min_p=_num(o, "min_p", float, DEFAULTS["min_p"]), typical_p=typical_p,
        repetition_penalty=_num(o, "repeat_penalty", float, DEFAULTS["repeat_penalty"]),
        penalty_last_n=_num(o, "repeat_last_n", int, DEFAULTS["repeat_last_n"]),
        presence_penalty=_num(o, "presence_penalty", float, 0.0),
        frequency_penalty=_num(o, "frequency_penalty", float, 0.0),
        seed=None if seed is None or seed < 0 else seed)  # Ollama: -1 means random
    if sp.penalty_last_n < 0:  # -1: the whole context
        sp.penalty_last_n = num_ctx or 4096
    return {"sampling": sp, "max_tokens": n_predict if n_predict is not None and n_predict >= 0 else None,
            "stop": [s for s in stop if s], "num_ctx": num_ctx, "clamp_to_context": True}


def with_logprobs(fields: dict[str, Any], body: Any) -> dict[str, Any]:
    """Ollama's top-level `logprobs` / `top_logprobs` into the sampling parameters."""
    top = body.top_logprobs or 0
    if top and not body.logprobs:
        raise InvalidInput("top_logprobs needs logprobs: true", "top_logprobs")
    fields["sampling"].logprobs, fields["sampling"].top_logprobs = bool(body.logprobs), top
    return fields


def logprobs(lps: list[TokenLogprob]) -> list[dict[str, Any]]:
    """Ollama's shape: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]."""
    return [{"token": t.text, "logprob": t.logprob, "bytes": list(t.bytes),
             "top_logprobs": [{"token": s, "logprob": lp, "bytes": list(b)} for _i, s, b, lp in t.top]}
            for t in lps]


def chat_options(format: Any, think: Any, tools: list | None = None, tool_choice: Any = None) -> ChatOptions:
    """Ollama's `format` ("json" | a schema), `think` (bool or a level) and tools. A level
    ("low" / "medium" / "high", as Ollama takes for gpt-oss) turns thinking on and sets the
    budget of that effort (chat.reasoning.EFFORT_BUDGETS)."""
    return ChatOptions(tools=tools, tool_choice=tool_choice, json_format=format,
                       enable_thinking=requested_thinking(think=think), thinking_param="think",
                       reasoning_effort=think if isinstance(think, str) else None, tool_call_ids="optional")


def chat_request(body: ChatRequest) -> GenerateRequest:
    messages = []
    for m in body.messages:
        msg = m.model_dump(exclude_none=True, exclude={"images", "thinking"})
        if m.images:  # Ollama's raw base64 images: image parts before the text, as Ollama places them
            msg["content"] = with_images(m.images, msg.get("content") or "")
        messages.append(msg)
    return GenerateRequest(model=body.model, messages=messages, stream=body.stream,
                           keep_alive=keep_alive(body.keep_alive),
                           chat=chat_options(body.format, body.think, body.tools, body.tool_choice),
                           lora=lora_refs(body.lora), **with_logprobs(options_to_request(body.options), body))


def with_images(images: list[str], text: str) -> list[dict[str, Any]]:
    """Content parts for a message with Ollama `images` (raw base64, or data URIs)."""
    return [*({"type": "image", "data": b} for b in images), {"type": "text", "text": text}]


def generate_request(body: GenerateBody) -> GenerateRequest:
    if body.tools or body.tool_choice not in (None, "auto", "none"):
        param = "tools" if body.tools else "tool_choice"
        raise InvalidInput(f"'{param}' is taken by /api/chat (messages), not /api/generate", param)
    if body.images and body.raw:
        raise InvalidInput("'images' need the model's chat template: they cannot be sent with raw: true", "images")
    if body.suffix and (body.images or body.system):
        raise InvalidInput(f"suffix (fill-in-the-middle) cannot be combined with "
                           f"'{'images' if body.images else 'system'}'", "suffix")
    if body.template:
        raise InvalidInput("'template' (a Go template) is not supported; send raw: true with a formatted prompt",
                           "template")
    common = dict(model=body.model, stream=body.stream, keep_alive=keep_alive(body.keep_alive),
                  prefix_tokens=list(body.context or []), chat=chat_options(body.format, body.think),
                  lora=lora_refs(body.lora), **with_logprobs(options_to_request(body.options), body))
    if body.suffix:  # the prompt is the text before the cursor; the model's FIM tokens frame both (service/fim.py)
        return GenerateRequest(prompt=body.prompt or "", infill=Infill(prefix=body.prompt or "", suffix=body.suffix),
                               infill_param="suffix", **common)
    if body.raw:
        return GenerateRequest(prompt=body.prompt or "", add_special=not body.context, **common)
    content: Any = with_images(body.images, body.prompt or "") if body.images else body.prompt or ""
    messages = ([{"role": "system", "content": body.system}] if body.system else []) + \
        [{"role": "user", "content": content}]
    return GenerateRequest(messages=messages, template_fallback=True, **common)


def is_load_only(prompt: str | None, messages: list | None, context: list[int] | None = None) -> bool:
    """Ollama loads (or unloads) a model when asked to generate from nothing."""
    return not prompt and not messages and not context


# ---- responses --------------------------------------------------------------------------------
def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def stats(u: Usage) -> dict[str, Any]:
    return {"total_duration": _ns(u.total_seconds), "load_duration": _ns(u.load_seconds),
            "prompt_eval_count": u.prompt_tokens, "prompt_eval_duration": _ns(u.prompt_seconds),
            "eval_count": u.completion_tokens, "eval_duration": _ns(u.generation_seconds),
            "ttft": round(u.ttft, 6), "tps": round(u.tps, 3)}


def load_response(model: str, chat: bool, unloaded: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"model": tagged(model), "created_at": iso(time.time()), "done": True,
                           "done_reason": "unload" if unloaded else "load"}
    if chat:
        out["message"] = {"role": "assistant", "content": ""}
    else:
        out["response"] = ""
    return out


def _done_reason(reason: str) -> str:
    return "stop" if reason == "tool_calls" else reason  # Ollama says "stop" after tool calls


def _message(content: str, thinking: str | None, calls: list) -> dict[str, Any]:
    """Ollama's assistant message: `thinking` and `tool_calls` (arguments as objects) only
    when there are any."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        msg["thinking"] = thinking
    if calls:
        msg["tool_calls"] = [c.ollama() for c in calls]
    return msg


def _lp(out: dict[str, Any], lps: list[TokenLogprob] | None) -> dict[str, Any]:
    if lps is not None:
        out["logprobs"] = logprobs(lps)
    return out


def chat_response(g: Generation) -> dict[str, Any]:
    return _lp({"model": tagged(g.model), "created_at": iso(time.time()),
                "message": _message(g.text, g.reasoning, g.tool_calls),
                "done": True, "done_reason": _done_reason(g.finish_reason), **stats(g.usage)}, g.logprobs)


def generate_response(g: Generation) -> dict[str, Any]:
    out = {"model": tagged(g.model), "created_at": iso(time.time()), "response": g.text}
    if g.reasoning:
        out["thinking"] = g.reasoning
    return _lp({**out, "done": True, "done_reason": _done_reason(g.finish_reason),
                "context": g.prompt_tokens + g.tokens, **stats(g.usage)}, g.logprobs)


def _has_output(d: Delta) -> bool:
    return bool(d.text or d.reasoning or d.tool_calls)


async def chat_chunks(stream: Any) -> AsyncIterator[dict[str, Any]]:
    first, model = True, tagged(stream.model)
    want_lp, held = stream.req.sampling.logprobs, []  # logprobs of tokens whose text is held back
    async for d in stream:
        held.extend(d.logprobs)
        if _has_output(d):
            chunk = {"model": model, "created_at": iso(time.time()),
                     "message": _message(d.text, d.reasoning, d.tool_calls), "done": False}
            if want_lp:
                chunk["logprobs"], held = logprobs(held), []
            _progress(chunk, d.usage, first)
            first = False
            yield chunk
        if d.finish_reason:
            final = {"model": model, "created_at": iso(time.time()),
                     "message": {"role": "assistant", "content": ""}, "done": True,
                     "done_reason": _done_reason(d.finish_reason), **stats(d.usage or Usage())}
            yield _lp(final, held if want_lp and held else None)


def _progress(chunk: dict[str, Any], u: Usage | None, first: bool) -> None:
    """GenAIServer's stream extensions in Ollama's words: ttft once, then tps and the tokens
    generated so far (eval_count) in every chunk."""
    if u is not None:
        if first:
            chunk["ttft"] = round(u.ttft, 6)
        chunk["tps"] = round(u.tps, 3)
        chunk["eval_count"] = u.completion_tokens


async def generate_chunks(stream: Any) -> AsyncIterator[dict[str, Any]]:
    first, tokens, model = True, [], tagged(stream.model)
    want_lp, held = stream.req.sampling.logprobs, []
    async for d in stream:
        tokens.extend(d.tokens)
        held.extend(d.logprobs)
        if d.text or d.reasoning:
            chunk = {"model": model, "created_at": iso(time.time()), "response": d.text}
            if d.reasoning:
                chunk["thinking"] = d.reasoning
            if want_lp:
                chunk["logprobs"], held = logprobs(held), []
            chunk["done"] = False
            _progress(chunk, d.usage, first)
            first = False
            yield chunk
        if d.finish_reason:
            final = {"model": model, "created_at": iso(time.time()), "response": "", "done": True,
                     "done_reason": _done_reason(d.finish_reason), "context": stream.prompt_tokens + tokens,
                     **stats(d.usage or Usage())}
            yield _lp(final, held if want_lp and held else None)


# ---- defaults (pure) -----------------------------------------------------------------
def apply_model_defaults(spec: ModelSpec | None, body: ChatRequest | GenerateBody) -> None:
    if spec is None:
        return
    m = spec.manifest
    opts = m.get("options")
    if isinstance(opts, dict) and opts:
        body.options = {**opts, **(body.options or {})}
    system = m.get("system")
    if not isinstance(system, str) or not system:
        return
    if isinstance(body, ChatRequest):
        if body.messages and not any(x.role == "system" for x in body.messages):
            body.messages = [OllamaMessage(role="system", content=system), *body.messages]
    elif body.system is None and not body.raw:
        body.system = system


# ---- routes --------------------------------------------------------------------------
router = APIRouter(prefix="/api")


async def _load_only(svc: InferenceService, body: ChatRequest | GenerateBody, chat: bool) -> dict:
    """A request with nothing to generate loads the model (or, with keep_alive 0, unloads it)."""
    ka = keep_alive(body.keep_alive)
    spec = await svc.load_generator(body.model, ka)
    return load_response(spec.name, chat=chat, unloaded=ka == 0)


@router.post("/chat")
async def chat(body: ChatRequest, request: Request, svc: InferenceService = Depends(get_service)):
    if is_load_only(None, body.messages):
        return await _load_only(svc, body, chat=True)
    apply_model_defaults(svc.lookup(body.model), body)
    return await generate_or_stream(request, svc, chat_request(body),
                                    stream=lambda s: ndjson_response(chat_chunks(s), s.aclose),
                                    respond=chat_response)


@router.post("/generate")
async def generate(body: GenerateBody, request: Request, svc: InferenceService = Depends(get_service)):
    if is_load_only(body.prompt, None, body.context) and not body.images and not body.suffix:
        return await _load_only(svc, body, chat=False)
    apply_model_defaults(svc.lookup(body.model), body)
    return await generate_or_stream(request, svc, generate_request(body),
                                    stream=lambda s: ndjson_response(generate_chunks(s), s.aclose),
                                    respond=generate_response)
