"""OpenAI face, generation: /v1/chat/completions and /v1/completions (and the unversioned
aliases llama-server clients use), in three sections:

- wire requests, with the extension fields llama-server, openai-server, GenAIServer and
  Antfly accept (top_k, min_p, repetition_penalty, grammar, chat_template,
  chat_template_kwargs, enable_thinking, ignore_eos, the engine controls, and llama-server's
  lora, return_progress and sse_ping_interval; `suffix` makes a completion fill in the middle). Unknown fields
  are ignored, as OpenAI clients send many (user, store, ...);
- wire <-> engine: pure functions, plus async generators that map a GenerationStream's deltas
  to chunks. The Antfly face reuses them with its Dialect (dialect.py): `cached_prompt_tokens`
  in usage and the `speculation` report;
- the thin routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal
import uuid

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from inferd.api.chat_only import refuse_chat_only
from inferd.api.deps import get_service
from inferd.api.llamacpp.timings import llama_timings
from inferd.api.infill import LoraEntry, lora_refs, ping_interval, progress
from inferd.api.openai.dialect import Dialect, OPENAI
from inferd.api.streaming import generate_or_stream, sse_response
from inferd import __version__
from inferd.chat.reasoning import effort_budget, requested_thinking
from inferd.errors import InvalidInput
from inferd.service import InferenceService
from inferd.types import (ChatOptions, EngineControls, GenerateRequest, Generation, Infill, SamplingParams,
                          TokenLogprob, Usage, total_usage)


# ---- wire requests -------------------------------------------------------------------
class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, tool_call_id, ... reach the template
    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields shared by chat and completions."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    max_tokens: int | None = Field(None, ge=0)
    max_completion_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0)
    repeat_penalty: float | None = Field(None, gt=0.0)  # llama-server's name
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    n: int = Field(1, ge=1, le=8)  # as vLLM and llama-server; at most the model's parallel slots
    ignore_eos: bool = False
    grammar: str | None = None
    # The engine controls of the Antfly spec (docs/engine.md), accepted on every generation face
    # as llama-server and vLLM accept their own extensions (`extra_body` in the openai client).
    # A value inferd cannot honour is refused here (a Literal names the accepted values) or by
    # the service against the loaded model (cache_dtype, draft_model), never ignored.
    draft_model: str | None = Field(None, min_length=1, max_length=256)
    speculative_k: int | None = Field(None, ge=1, le=16)
    speculation_policy: Literal["auto", "on", "off"] = "auto"
    speculation_calibration: Literal["none", "online"] = "none"
    cache_dtype: Literal["f16", "bf16", "q8_0", "q4_0", "f32"] | None = None
    cache_compaction_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    prompt_cache: bool = True
    cache_prompt: bool | None = None  # llama-server's name for prompt_cache
    prompt_cache_key: str | None = Field(None, max_length=256)  # OpenAI's own field: slot affinity here
    # llama-server's extensions: this request's LoRA set, prompt progress in the stream, keep-alive pings
    lora: list[LoraEntry] | None = None
    return_progress: bool = False
    sse_ping_interval: float | None = None

    @model_validator(mode="after")
    def _cache_prompt_alias(self) -> "SamplingFields":
        if self.cache_prompt is not None:
            if "prompt_cache" in self.model_fields_set and self.prompt_cache != self.cache_prompt:
                raise ValueError("prompt_cache and cache_prompt (its llama-server name) disagree")
            self.prompt_cache = self.cache_prompt
        return self


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None  # none | minimal | low | medium | high (chat.reasoning.EFFORT_BUDGETS)
    reasoning_budget: int | None = Field(None, ge=0)  # extension: thinking tokens allowed, exactly
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]] = ""
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(None, ge=0, le=20)  # legacy: how many top tokens per position
    best_of: int | None = Field(None, ge=1)
    # Chat fields openai-server's table lists for both routes. A completion prompt is sent as
    # written (no template renders it, no tool prompt is added), so a value that asks for
    # anything is a 400 naming the field (api/chat_only.py), never silently dropped.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    chat_template: str | None = None
    enable_thinking: bool | None = None
    # Structured output on a raw prompt, as llama-server and vLLM take it: the schema's grammar
    # constrains the completion (no template is involved).
    response_format: dict[str, Any] | None = None


# ---- wire <-> engine (pure functions) ------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


# OpenAI's `system_fingerprint` (llama-server sends its build): which server build answered.
SYSTEM_FINGERPRINT = f"inferd-{__version__}"


# ---- requests ---------------------------------------------------------------------------------
def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    return [s for s in stops if s]  # how many and how long: the service's rule (service/limits.py)


def _logit_bias(raw: dict[str, float] | None) -> dict[int, float]:
    out: dict[int, float] = {}
    for k, v in (raw or {}).items():
        try:
            tok = int(k)
        except ValueError:
            raise InvalidInput(f"logit_bias keys must be token ids, got {k!r}", "logit_bias") from None
        if not -100.0 <= v <= 100.0:
            raise InvalidInput("logit_bias values must be between -100 and 100", "logit_bias")
        out[tok] = float(v)
    return out


def sampling(body: SamplingFields, logprobs: bool = False, top_logprobs: int = 0,
             grammar: str | None = None) -> SamplingParams:
    rep = body.repetition_penalty if body.repetition_penalty is not None else body.repeat_penalty
    return SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k or 0, min_p=body.min_p or 0.0,
        repetition_penalty=1.0 if rep is None else rep,
        frequency_penalty=body.frequency_penalty or 0.0, presence_penalty=body.presence_penalty or 0.0,
        seed=body.seed, logit_bias=_logit_bias(body.logit_bias), grammar=grammar,
        ignore_eos=body.ignore_eos, logprobs=logprobs, top_logprobs=top_logprobs)


def _common(body: SamplingFields) -> dict[str, Any]:
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    return {"model": body.model or "", "max_tokens": max_tokens, "stop": _stops(body.stop), "stream": body.stream,
            "n": body.n, "engine": engine_controls(body), "lora": lora_refs(body.lora),
            "return_progress": body.return_progress}


def engine_controls(body: SamplingFields) -> EngineControls:
    return EngineControls(
        cache_dtype=body.cache_dtype, prompt_cache=body.prompt_cache, prompt_cache_key=body.prompt_cache_key,
        cache_compaction_ratio=body.cache_compaction_ratio, draft_model=body.draft_model,
        speculative_k=body.speculative_k, speculation_policy=body.speculation_policy,
        speculation_calibration=body.speculation_calibration)


def chat_options(body: ChatCompletionRequest) -> ChatOptions:
    """Tools, structured output, raw grammar and thinking, as given (the service plans and
    validates them against the model's template)."""
    return ChatOptions(tools=body.tools, tool_choice=body.tool_choice,
                       parallel_tool_calls=True if body.parallel_tool_calls is None else body.parallel_tool_calls,
                       response_format=body.response_format, grammar=body.grammar,
                       enable_thinking=requested_thinking(body.enable_thinking, body.chat_template_kwargs),
                       reasoning_effort=_effort(body.reasoning_effort), reasoning_budget=body.reasoning_budget)


def _effort(effort: str | None) -> str | None:
    if effort is not None:
        effort_budget(effort)  # an unknown level is a 400 naming reasoning_effort
    return effort


# The roles OpenAI's chat API accepts; any other is a 400 there, so here too.
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def check_roles(messages: list) -> None:
    for i, m in enumerate(messages):
        if m.role not in ROLES:
            raise InvalidInput(f"messages[{i}].role must be one of {', '.join(sorted(ROLES))}, not {m.role!r}",
                               f"messages.{i}.role")


def chat_request(body: ChatCompletionRequest) -> GenerateRequest:
    check_roles(body.messages)
    top = body.top_logprobs or 0
    if top and not body.logprobs:
        raise InvalidInput("top_logprobs needs logprobs: true", "top_logprobs")
    return GenerateRequest(messages=[m.model_dump(exclude_none=True) for m in body.messages],
                           sampling=sampling(body, body.logprobs, top), chat_template=body.chat_template,
                           template_kwargs=dict(body.chat_template_kwargs or {}), chat=chat_options(body),
                           **_common(body))


def completion_prompt(prompt: str | list[str] | list[int] | list[list[int]]) -> str | list[int]:
    """A string; several strings joined by newlines (as GenAIServer does); or token ids."""
    if isinstance(prompt, str):
        return prompt
    if not prompt:
        return ""
    if all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)  # type: ignore[arg-type]
    if all(isinstance(p, int) for p in prompt):
        return list(prompt)  # type: ignore[arg-type]
    if len(prompt) == 1 and isinstance(prompt[0], list):
        return list(prompt[0])
    raise InvalidInput("a batch of token-id prompts is not supported; send one prompt per request", "prompt")


def echo_text(body: CompletionRequest) -> str | None:
    """The prompt to repeat before the completion (`echo`), for text prompts."""
    if not body.echo:
        return None
    prompt = completion_prompt(body.prompt)
    if not isinstance(prompt, str):
        raise InvalidInput("echo is supported for text prompts only", "echo")
    return prompt


def completion_request(body: CompletionRequest) -> GenerateRequest:
    refuse_chat_only(body.tools, body.tool_choice, body.chat_template, body.enable_thinking)
    if body.best_of not in (None, 1):
        raise InvalidInput("best_of > 1 is not supported", "best_of")
    n_top = body.logprobs
    prompt = completion_prompt(body.prompt)
    infill = None
    if body.suffix:  # fill-in-the-middle: the prompt is the text before the cursor (service/fim.py)
        if not isinstance(prompt, str):
            raise InvalidInput("suffix needs a text prompt (the text before the insertion point)", "suffix")
        infill = Infill(prefix=prompt, suffix=body.suffix)
    # response_format goes through the chat planner (its one 400 for a bad type or schema, and
    # for grammar + response_format together); a raw grammar alone stays a sampling grammar.
    rf = body.response_format
    chat = ChatOptions(response_format=rf, grammar=body.grammar) if rf else None
    return GenerateRequest(prompt=prompt, infill=infill, infill_param="suffix", chat=chat,
                           sampling=sampling(body, n_top is not None, n_top or 0, None if chat else body.grammar),
                           **_common(body))


# ---- responses --------------------------------------------------------------------------------
def usage_dict(u: Usage, dialect: Dialect = OPENAI) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                           "total_tokens": u.total_tokens,
                           "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
                           "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens}}
    if dialect.cached_prompt_tokens:
        out["cached_prompt_tokens"] = u.cached_prompt_tokens
    return out


def timings(u: Usage, speculation: dict[str, Any] | None = None) -> dict[str, Any]:
    """llama-server's `timings` (cache_n, prompt_n, prompt_ms, ..., predicted_per_second), with its
    draft_n / draft_n_accepted when the request speculated, and GenAIServer's ttft and tps."""
    out = {**llama_timings(u), "ttft": round(u.ttft, 6), "tps": round(u.tps, 3),
           "cached_prompt_tokens": u.cached_prompt_tokens}
    if speculation is not None and speculation.get("decision") == "enabled":
        out["draft_n"], out["draft_n_accepted"] = speculation["drafted_tokens"], speculation["accepted_tokens"]
    return out


def _report(stream: Any) -> dict[str, Any] | None:
    spec = getattr(stream, "speculation", None)
    return spec.report() if spec is not None else None


def _lp_entry(token: str, lp: float, b: bytes) -> dict[str, Any]:
    return {"token": token, "logprob": lp, "bytes": list(b)}


def chat_logprobs(lps: list[TokenLogprob]) -> dict[str, Any]:
    return {"content": [{**_lp_entry(t.text, t.logprob, t.bytes),
                         "top_logprobs": [_lp_entry(s, lp, b) for _i, s, b, lp in t.top]} for t in lps],
            "refusal": None}


def completion_logprobs(lps: list[TokenLogprob], offset: int) -> dict[str, Any]:
    offsets, pos = [], offset
    for t in lps:
        offsets.append(pos)
        pos += len(t.text)
    return {"tokens": [t.text for t in lps], "token_logprobs": [t.logprob for t in lps],
            "top_logprobs": [_top_by_text(t) for t in lps], "text_offset": offsets}


def _top_by_text(t: TokenLogprob) -> dict[str, float]:
    """The legacy API keys alternatives by text, and two tokens can share a text: keep the
    larger logprob, and give the sampled token's text the logprob reported for it."""
    out: dict[str, float] = {}
    for _i, s, _b, lp in t.top:
        if s not in out or lp > out[s]:
            out[s] = lp
    if t.top:
        out[t.text] = t.logprob
    return out


def chat_message(g: Generation) -> dict[str, Any]:
    """The assistant message: content (null when the answer is only tool calls), and
    `reasoning_content` / `tool_calls` when there are any."""
    msg: dict[str, Any] = {"role": "assistant", "content": g.text if g.text or not g.tool_calls else None,
                           "refusal": None}  # required by OpenAI's schema; a local model never refuses
    if g.reasoning:
        msg["reasoning_content"] = g.reasoning
    if g.tool_calls:
        msg["tool_calls"] = [c.openai() for c in g.tool_calls]
    return msg


def chat_response(g: Generation, dialect: Dialect = OPENAI) -> dict[str, Any]:
    choices = [{"index": c.index, "message": chat_message(c),
                "logprobs": chat_logprobs(c.logprobs) if c.logprobs is not None else None,
                "finish_reason": c.finish_reason} for c in [g, *g.choices]]
    return {"id": new_id("chatcmpl"), "object": "chat.completion", "created": int(g.created), "model": g.model,
            "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices, "usage": usage_dict(g.usage, dialect), "timings": timings(g.usage, g.speculation)}


def completion_response(g: Generation, echo_text: str | None = None) -> dict[str, Any]:
    prefix = echo_text or ""
    choices = [{"index": c.index, "text": prefix + c.text, "finish_reason": c.finish_reason,
                "logprobs": completion_logprobs(c.logprobs, len(prefix)) if c.logprobs is not None else None}
               for c in [g, *g.choices]]
    return {"id": new_id("cmpl"), "object": "text_completion", "created": int(g.created), "model": g.model,
            "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices, "usage": usage_dict(g.usage), "timings": timings(g.usage, g.speculation)}


# ---- streams ----------------------------------------------------------------------------------
def _progress(chunk: dict[str, Any], u: Usage | None, first: bool) -> dict[str, Any]:
    """GenAIServer's stream extensions: ttft once, tps and generated_tokens as they go."""
    if u is not None:
        if first:
            chunk["ttft"] = round(u.ttft, 6)
        chunk["tps"] = round(u.tps, 3)
        chunk["generated_tokens"] = u.completion_tokens
    return chunk


async def chat_chunks(stream: Any, include_usage: bool, dialect: Dialect = OPENAI) -> AsyncIterator[dict[str, Any]]:
    cid, created = "chatcmpl-" + stream.id, int(stream.created)
    head = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": stream.model,
            "system_fingerprint": SYSTEM_FINGERPRINT}
    want_lp = stream.req.sampling.logprobs
    n = max(1, stream.req.n)
    for i in range(n):
        yield {**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                    "finish_reason": None}]}
    first = True
    usages: list[Usage | None] = [None] * n
    async for d in stream:
        if d.progress is not None:  # return_progress (llama-server): prompt processing so far
            yield {**head, "choices": [], "prompt_progress": progress(d.progress)}
            continue
        usages[d.index] = d.usage or usages[d.index]
        delta: dict[str, Any] = {}
        if d.reasoning:
            delta["reasoning_content"] = d.reasoning
        if d.text:
            delta["content"] = d.text
        if d.tool_calls:
            delta["tool_calls"] = [c.openai_delta() for c in d.tool_calls]
        if delta or (want_lp and d.logprobs):
            choice = {"index": d.index, "delta": delta or {"content": ""},
                      "logprobs": chat_logprobs(d.logprobs) if want_lp else None, "finish_reason": None}
            yield _progress({**head, "choices": [choice]}, d.usage, first)
            first = False
        if d.finish_reason:
            final = {**head, "choices": [{"index": d.index, "delta": {}, "logprobs": None,
                                          "finish_reason": d.finish_reason}]}
            report = _report(stream)
            if dialect.speculation and report is not None:  # what speculation did, once it is known
                final["speculation"] = report
            yield _progress(final, d.usage, first)
    if include_usage and all(u is not None for u in usages):
        usage = total_usage([u for u in usages if u is not None])
        yield {**head, "choices": [], "usage": usage_dict(usage, dialect), "timings": timings(usage, _report(stream))}


async def completion_chunks(stream: Any, include_usage: bool, echo_text: str | None = None
                            ) -> AsyncIterator[dict[str, Any]]:
    cid, created = "cmpl-" + stream.id, int(stream.created)
    head = {"id": cid, "object": "text_completion", "created": created, "model": stream.model,
            "system_fingerprint": SYSTEM_FINGERPRINT}
    want_lp = stream.req.sampling.logprobs
    n = max(1, stream.req.n)
    first, offsets = True, [0] * n
    usages: list[Usage | None] = [None] * n
    if echo_text:
        for i in range(n):
            yield {**head, "choices": [{"index": i, "text": echo_text, "logprobs": None, "finish_reason": None}]}
        offsets = [len(echo_text)] * n
    async for d in stream:
        if d.progress is not None:
            yield {**head, "choices": [], "prompt_progress": progress(d.progress)}
            continue
        usages[d.index] = d.usage or usages[d.index]
        if d.text or (want_lp and d.logprobs) or d.finish_reason:
            choice = {"index": d.index, "text": d.text, "finish_reason": d.finish_reason,
                      "logprobs": completion_logprobs(d.logprobs, offsets[d.index]) if want_lp else None}
            offsets[d.index] += len(d.text)
            yield _progress({**head, "choices": [choice]}, d.usage, first)
            first = False
    if include_usage and all(u is not None for u in usages):
        usage = total_usage([u for u in usages if u is not None])
        yield {**head, "choices": [], "usage": usage_dict(usage), "timings": timings(usage, _report(stream))}


# ---- routes --------------------------------------------------------------------------
router = APIRouter()


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request,
                           svc: InferenceService = Depends(get_service)):
    usage = bool(body.stream_options and body.stream_options.include_usage)
    return await generate_or_stream(
        request, svc, chat_request(body),
        stream=lambda s: sse_response(chat_chunks(s, usage, OPENAI), s.aclose, OPENAI.name,
                                      ping=ping_interval(body.sse_ping_interval)),
        respond=chat_response)


@router.post("/v1/completions")  # bare /completions is llama-server's native one (api/llamacpp)
async def completions(body: CompletionRequest, request: Request, svc: InferenceService = Depends(get_service)):
    echo = echo_text(body)
    usage = bool(body.stream_options and body.stream_options.include_usage)
    return await generate_or_stream(
        request, svc, completion_request(body),
        stream=lambda s: sse_response(completion_chunks(s, usage, echo), s.aclose, OPENAI.name,
                                      ping=ping_interval(body.sse_ping_interval)),
        respond=lambda g: completion_response(g, echo))
