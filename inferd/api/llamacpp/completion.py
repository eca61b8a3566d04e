"""llama-server's native completion: POST /completion (and /completions, its other name there),
as its tools/server README documents it, in three sections:

- the wire request: llama-server's field names and defaults (temperature 0.8, top_k 40,
  top_p 0.95, min_p 0.05, n_predict -1). Unknown fields are ignored, as llama-server ignores
  them; a known field with a value inferd cannot honour (mirostat, DRY, XTC, ...) is a 400
  naming it, never ignored;
- converters: the prompt shapes (string, token ids, a mixed list, a list of prompts), the two
  `logit_bias` forms, `samplers` (a list of names or llama.cpp's letters) to the engine's
  GenerateRequest; engine results and deltas to llama-server's result objects and SSE frames;
- the thin routes: the same service verbs as /v1/completions (open a GenerationStream, drain
  it with `collect` or stream it); errors in llama-server's envelope (api/errors.py, family
  `llamacpp`)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from inferd.api.chat_only import refuse_chat_only
from inferd.api.infill import LoraEntry, lora_refs
from inferd.api.deps import get_service
from inferd.api.llamacpp.timings import llama_timings
from inferd.api.streaming import cancel_on_disconnect, sse_response
from inferd.errors import InvalidInput
from inferd.service import InferenceService
from inferd.service.generation import GenerationStream, collect
from inferd.types import (SAMPLER_STAGES, ChatOptions, EngineControls, GenerateRequest, Generation, SamplingParams,
                          TokenLogprob, Usage)

MAX_PROMPTS = 64        # prompts in one request (each is a sequence on the engine)
MAX_N_PROBS = 20        # the engine's top-logprobs bound
MAX_TEXTS = 1024        # strings to tokenize in one mixed prompt, and logit_bias entries: each is a tokenize call


# ---- wire request -----------------------------------------------------------------------------
class CompletionBody(BaseModel):
    """llama-server's /completion options (tools/server README), with its defaults."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)
    model: str | None = None
    prompt: Any = None
    n_predict: int | None = Field(None, ge=-1)
    max_tokens: int | None = Field(None, ge=-1)  # llama-server reads it when n_predict is absent
    max_completion_tokens: int | None = Field(None, ge=-1)  # openai-server's alias of max_tokens
    temperature: float = 0.8
    top_k: int = Field(40, ge=0)
    top_p: float = Field(0.95, ge=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    typical_p: float = Field(1.0, gt=0.0, le=1.0)
    repeat_penalty: float = Field(1.0, gt=0.0)
    repeat_last_n: int = Field(64, ge=-1)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = Field(-1, ge=-1, le=0xFFFFFFFF)
    stop: list[str] | str | None = None
    ignore_eos: bool = False
    n_probs: int = Field(0, ge=0, le=MAX_N_PROBS)
    logit_bias: list[list[Any]] | dict[str, Any] | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    cache_prompt: bool = True
    id_slot: int = Field(-1, ge=-1)
    n_keep: int = Field(0, ge=-1)
    n_cmpl: int = Field(1, ge=1, le=8)
    return_tokens: bool = False
    samplers: list[str] | str | None = None
    lora: list[LoraEntry] | None = None
    stream: bool = False
    timings_per_token: bool = False
    response_fields: list[str] | None = None
    # speculative decoding: llama-server's draft length, and inferd's engine controls (docs/engine.md)
    speculative_n_max: int | None = Field(None, alias="speculative.n_max", ge=1, le=16)
    draft_model: str | None = Field(None, min_length=1, max_length=256)
    speculation_policy: Literal["auto", "on", "off"] = "auto"
    # Known options inferd has no sampler for: accepted at their "off" value only.
    mirostat: int = 0
    dry_multiplier: float = 0.0
    xtc_probability: float = 0.0
    dynatemp_range: float = 0.0
    top_n_sigma: float = -1.0
    min_keep: int = 0
    n_indent: int = 0
    t_max_predict_ms: int = 0
    n_cache_reuse: int = 0
    post_sampling_probs: bool = False
    return_progress: bool = False
    # openai-server lists these for its bare /completions too: a 400 naming each (api/chat_only.py).
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    chat_template: str | None = None


# Options accepted only at their off value: field -> (is it off?, why).
_OFF: dict[str, tuple[Any, str]] = {
    "mirostat": (lambda v: v == 0, "Mirostat sampling is not available"),
    "dry_multiplier": (lambda v: v == 0, "DRY sampling is not available"),
    "xtc_probability": (lambda v: v <= 0, "XTC sampling is not available"),
    "dynatemp_range": (lambda v: v == 0, "dynamic temperature is not available"),
    "top_n_sigma": (lambda v: v <= 0, "top-n-sigma sampling is not available"),
    "min_keep": (lambda v: v == 0, "min_keep is not available"),
    "n_indent": (lambda v: v == 0, "n_indent is not available"),
    "t_max_predict_ms": (lambda v: v <= 0, "t_max_predict_ms is not available"),
    "n_cache_reuse": (lambda v: v <= 0, "KV-shift cache reuse (n_cache_reuse) is not available; the prompt "
                                         "prefix is reused without it"),
    "post_sampling_probs": (lambda v: not v, "post_sampling_probs is not available: n_probs reports the "
                                             "model's own distribution"),
    "return_progress": (lambda v: not v, "return_progress is not available"),
}


def check_supported(body: CompletionBody) -> None:
    for name, (off, why) in _OFF.items():
        if not off(getattr(body, name)):
            raise InvalidInput(f"{name}: {why} in inferd (leave it at its default)", name)
    refuse_chat_only(body.tools, body.tool_choice, body.chat_template)
    if body.grammar is not None and body.json_schema is not None:
        raise InvalidInput("send grammar or json_schema, not both", "grammar")


# ---- samplers ---------------------------------------------------------------------------------
# llama-server's sampler names (and llama.cpp's other spellings) -> the engine's stage.
_NAMES = {"penalties": "penalties", "top_k": "top_k", "top-k": "top_k", "typ_p": "typ_p", "typical_p": "typ_p",
          "typical-p": "typ_p", "typical": "typ_p", "typ-p": "typ_p", "typ": "typ_p", "top_p": "top_p",
          "top-p": "top_p", "nucleus": "top_p", "min_p": "min_p", "min-p": "min_p", "temperature": "temperature",
          "temp": "temperature",
          # stages inferd has no sampler for: named, they do nothing while their setting is off
          # (they are off by default in llama-server too; turning one on is a 400 above)
          "dry": "", "xtc": "", "top_n_sigma": "", "top-n-sigma": ""}
_LETTERS = {"e": "penalties", "d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "m": "min_p", "x": "xtc",
            "t": "temperature", "s": "top_n_sigma"}


def sampler_order(raw: list[str] | str | None) -> tuple[str, ...] | None:
    """`samplers` -> the engine's stage order (None: llama.cpp's default order)."""
    if raw is None:
        return None
    names: list[str] = []
    if isinstance(raw, str):  # llama.cpp's letters, e.g. "kypmt"
        for ch in raw:
            if ch not in _LETTERS:
                raise InvalidInput(f"samplers: unknown sampler letter {ch!r} (one of {''.join(_LETTERS)})", "samplers")
            names.append(_LETTERS[ch])
    else:
        names = list(raw)
    out = []
    for n in names:
        stage = _NAMES.get(n.lower())
        if stage is None:
            hint = " (infill is for /infill)" if n == "infill" else ""
            raise InvalidInput(f"samplers: unknown or unsupported sampler {n!r}{hint}; known: "
                               f"{', '.join(sorted(k for k, v in _NAMES.items() if v and '-' not in k))}", "samplers")
        if stage:
            out.append(stage)
    return tuple(out)


# ---- prompts and logit bias -----------------------------------------------------------------
Piece = str | list[int | str]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def split_prompts(prompt: Any) -> list[Piece]:
    """llama-server's prompt shapes -> one entry per prompt: a string, or a list of token ids
    and strings. One prompt: a string, token ids, or ids mixed with strings. Several: a list
    of those (strings, id lists, mixed lists, {"prompt_string": ...} objects)."""
    if prompt is None:
        raise InvalidInput("'prompt' is required", "prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, dict):
        return [_prompt_object(prompt, "prompt")]
    if not isinstance(prompt, list) or not prompt:
        raise InvalidInput("prompt must be a string, a list of token ids and strings, or a list of prompts",
                           "prompt")
    if any(_is_int(x) for x in prompt):  # token ids, maybe mixed with strings: ONE prompt
        return [_mixed(prompt, "prompt")]
    if len(prompt) > MAX_PROMPTS:
        raise InvalidInput(f"at most {MAX_PROMPTS} prompts in one request", "prompt")
    out: list[Piece] = []
    for i, p in enumerate(prompt):
        where = f"prompt.{i}"
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, list):
            out.append(_mixed(p, where))
        elif isinstance(p, dict):
            out.append(_prompt_object(p, where))
        else:
            raise InvalidInput(f"{where} must be a string, a list of token ids and strings, or an object", where)
    return out


def _mixed(items: list[Any], where: str) -> list[int | str]:
    if not items:
        raise InvalidInput(f"{where} is an empty list", where)
    if sum(isinstance(x, str) for x in items) > MAX_TEXTS:
        raise InvalidInput(f"{where}: at most {MAX_TEXTS} strings in one prompt list", where)
    for x in items:
        if not (_is_int(x) or isinstance(x, str)):
            raise InvalidInput(f"{where}: a prompt list holds token ids and strings only, not {type(x).__name__}",
                               where)
    return list(items)


def _prompt_object(p: dict[str, Any], where: str) -> str:
    if p.get("multimodal_data"):
        raise InvalidInput(f"{where}.multimodal_data: media in /completion prompts is not available; send images "
                           "to /v1/chat/completions", f"{where}.multimodal_data")
    text = p.get("prompt_string")
    if not isinstance(text, str):
        raise InvalidInput(f"{where}.prompt_string must be a string", f"{where}.prompt_string")
    return text


async def tokens_of(svc: InferenceService, model: str | None, piece: Piece) -> str | list[int]:
    """A mixed prompt as token ids: each string tokenized (special tokens parsed), BOS only
    before a first element that is a string, as llama-server does. A string stays text (the
    engine tokenizes it with BOS as the model asks)."""
    if isinstance(piece, str):
        return piece
    if all(_is_int(x) for x in piece):
        return [int(x) for x in piece]
    out: list[int] = []
    for i, x in enumerate(piece):
        if isinstance(x, str):
            _, ids, _ = await svc.tokenize(model, x, add_special=i == 0, parse_special=True)
            out.extend(ids)
        else:
            out.append(int(x))
    return out


async def logit_bias(svc: InferenceService, model: str | None,
                     raw: list[list[Any]] | dict[str, Any] | None) -> dict[int, float]:
    """[[id or text, bias or false], ...] or {"id or text": bias or false}: a text's tokens
    each get the bias; false bans the token (-inf). Later entries win."""
    if not raw:
        return {}
    if len(raw) > MAX_TEXTS:
        raise InvalidInput(f"logit_bias: at most {MAX_TEXTS} entries", "logit_bias")
    pairs: list[tuple[Any, Any]] = []
    if isinstance(raw, dict):
        pairs = [(int(k) if k.lstrip("-").isdigit() else k, v) for k, v in raw.items()]
    else:
        for i, e in enumerate(raw):
            if len(e) != 2:
                raise InvalidInput(f"logit_bias.{i} must be a [token or text, bias] pair", f"logit_bias.{i}")
            pairs.append((e[0], e[1]))
    out: dict[int, float] = {}
    for key, val in pairs:
        if val is False:
            bias = -math.inf
        elif isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val):
            bias = float(val)
        else:
            raise InvalidInput(f"logit_bias: the bias of {key!r} must be a number or false, not {val!r}",
                               "logit_bias")
        if _is_int(key):
            out[key] = bias
        elif isinstance(key, str) and key:
            _, ids, _ = await svc.tokenize(model, key, add_special=False, parse_special=False)
            for t in ids:
                out[t] = bias
        else:
            raise InvalidInput(f"logit_bias: a key must be a token id or a non-empty text, not {key!r}", "logit_bias")
    return out  # ids out of the vocabulary are a 400 when the sampler is built


# ---- wire -> engine ---------------------------------------------------------------------------
def n_predict(body: CompletionBody) -> int | None:
    n = body.n_predict if body.n_predict is not None else \
        body.max_tokens if body.max_tokens is not None else body.max_completion_tokens
    return None if n is None or n < 0 else n


def sampling(body: CompletionBody, bias: dict[int, float]) -> SamplingParams:
    return SamplingParams(
        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, min_p=body.min_p,
        typical_p=body.typical_p, repetition_penalty=body.repeat_penalty,
        frequency_penalty=body.frequency_penalty, presence_penalty=body.presence_penalty,
        # -1: the whole context (the service cuts a window past it to the context)
        penalty_last_n=(1 << 30) if body.repeat_last_n < 0 else body.repeat_last_n,
        seed=None if body.seed < 0 or body.seed == 0xFFFFFFFF else body.seed, logit_bias=bias,
        grammar=body.grammar, ignore_eos=body.ignore_eos, logprobs=body.n_probs > 0, top_logprobs=body.n_probs,
        samplers=sampler_order(body.samplers))


def stops(body: CompletionBody) -> list[str]:
    raw = [body.stop] if isinstance(body.stop, str) else body.stop or []
    return [s for s in raw if s]


def generate_request(body: CompletionBody, prompt: str | list[int], bias: dict[int, float]) -> GenerateRequest:
    chat = ChatOptions(json_format=body.json_schema) if body.json_schema is not None else None
    return GenerateRequest(
        model=body.model or "", prompt=prompt, max_tokens=n_predict(body), stop=stops(body),
        sampling=sampling(body, bias), stream=body.stream, chat=chat, n=body.n_cmpl,
        # n_predict past the context ends at the context (truncated), as in llama-server, not a 400
        clamp_to_context=True, lora=lora_refs(body.lora),
        engine=EngineControls(prompt_cache=body.cache_prompt, slot=None if body.id_slot < 0 else body.id_slot,
                              draft_model=body.draft_model, speculative_k=body.speculative_n_max,
                              speculation_policy=body.speculation_policy))


# ---- engine -> wire ---------------------------------------------------------------------------
def stop_type(finish: str | None, stop_word: str | None) -> str:
    if finish == "length":
        return "limit"
    if finish in ("stop", "tool_calls"):
        return "word" if stop_word else "eos"
    return "none"


def _prob(token: int, text: str, data: bytes, lp: float) -> dict[str, Any]:
    return {"id": token, "token": text, "bytes": list(data), "logprob": lp}


def probabilities(lps: list[TokenLogprob]) -> list[dict[str, Any]]:
    """`completion_probabilities`: each generated token with its n_probs most likely
    alternatives (log-probabilities of the model's own distribution, best first)."""
    return [{**_prob(t.token, t.text, t.bytes, t.logprob), "top_logprobs": [_prob(*x) for x in t.top]} for t in lps]


def settings(body: CompletionBody, req: GenerateRequest, model: str, n_ctx: int | None) -> dict[str, Any]:
    """`generation_settings`: the options as the engine runs them."""
    s = req.sampling
    return {"n_ctx": n_ctx, "n_predict": -1 if req.max_tokens is None else req.max_tokens, "model": model,
            "seed": 0xFFFFFFFF if s.seed is None else s.seed, "temperature": s.temperature, "top_k": s.top_k,
            "top_p": s.top_p, "min_p": s.min_p, "typical_p": s.typical_p, "repeat_last_n": body.repeat_last_n,
            "repeat_penalty": s.repetition_penalty, "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty, "mirostat": 0, "dry_multiplier": 0.0,
            "xtc_probability": 0.0, "dynatemp_range": 0.0, "top_n_sigma": -1.0, "stop": list(req.stop),
            "max_tokens": -1 if req.max_tokens is None else req.max_tokens, "n_keep": body.n_keep,
            "ignore_eos": s.ignore_eos, "stream": req.stream, "n_probs": s.top_logprobs, "min_keep": 0,
            "grammar": s.grammar or "", "samplers": list(s.samplers if s.samplers is not None else SAMPLER_STAGES),
            "logit_bias": [[t, b if math.isfinite(b) else False] for t, b in s.logit_bias.items()],
            "cache_prompt": req.engine.prompt_cache, "id_slot": body.id_slot, "n_cmpl": req.n,
            "timings_per_token": body.timings_per_token, "post_sampling_probs": False,
            "lora": [{"id": r.id, "scale": r.scale} for r in req.lora or []]}


def select(obj: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    """`response_fields`: only these; "a/b" brings `b` of object `a` up under the name "a/b"
    (llama-server's unnesting); a missing one is left out."""
    if fields is None:
        return obj
    out: dict[str, Any] = {}
    for f in fields:
        cur: Any = obj
        for part in f.split("/"):
            cur = cur.get(part, _MISSING) if isinstance(cur, dict) else _MISSING
        if cur is not _MISSING:
            out[f] = cur
    return out


_MISSING = object()


class Run:
    """What a result needs beyond the Generation: the request, the slot, the context, the prompt text."""

    def __init__(self, body: CompletionBody, req: GenerateRequest, stream: GenerationStream, prompt_text: str):
        self.body, self.req, self.prompt_text = body, req, prompt_text
        self.model, self._stream = stream.model, stream
        self.n_ctx: int | None = getattr(stream.handle.runtime, "n_ctx_seq", None)

    @property
    def id_slot(self) -> int:
        """The slot running it: known once the engine admitted it (-1 before)."""
        job = self._stream.job
        return job.slot if job is not None and job.slot is not None else -1

    def final(self, index: int, text: str, tokens: list[int], usage: Usage, finish: str | None,
              stop_word: str | None, lps: list[TokenLogprob] | None, first: bool = True) -> dict[str, Any]:
        """`first`: the prompt's first choice, whose speculation the stream reports."""
        n_all = usage.prompt_tokens + usage.completion_tokens
        out: dict[str, Any] = {
            "index": index, "content": text, "tokens": tokens if self.body.return_tokens else [],
            "id_slot": self.id_slot, "stop": True, "model": self.model, "tokens_predicted": usage.completion_tokens,
            "tokens_evaluated": usage.prompt_tokens,
            "generation_settings": settings(self.body, self.req, self.model, self.n_ctx),
            "prompt": self.prompt_text, "has_new_line": "\n" in text,
            # the context filled up before n_predict or a stop (inferd ends there; it shifts nothing)
            "truncated": finish == "length" and self.n_ctx is not None and n_all >= self.n_ctx,
            "stop_type": stop_type(finish, stop_word), "stopping_word": stop_word or "",
            "tokens_cached": usage.cached_prompt_tokens, "timings": llama_timings(usage)}
        spec = self._stream.speculation.report() if first and self._stream.speculation is not None else None
        if spec is not None and spec.get("decision") == "enabled":  # llama-server's draft counts
            out["timings"].update(draft_n=spec["drafted_tokens"], draft_n_accepted=spec["accepted_tokens"])
        if lps is not None:
            out["completion_probabilities"] = probabilities(lps)
        return select(out, self.body.response_fields)


def results(run: Run, g: Generation, base: int) -> list[dict[str, Any]]:
    """One result per choice (n_cmpl) of one prompt, indexed prompt * n_cmpl + choice."""
    return [run.final(base + c.index, c.text, c.tokens, c.usage, c.finish_reason, c.stop_word, c.logprobs,
                      c.index == 0)
            for c in [g, *g.choices]]


async def frames(run: Run, stream: GenerationStream, base: int = 0) -> AsyncIterator[dict[str, Any]]:
    """SSE frames: one per token (`content`, `tokens`, `stop`: false), then, per choice, the
    final object (`content` empty: it was streamed) with timings and stop_type."""
    body = run.body
    want_lp = body.n_probs > 0
    async for d in stream:
        if d.text or d.tokens:
            frame: dict[str, Any] = {"index": base + d.index, "content": d.text, "tokens": list(d.tokens),
                                     "stop": False, "id_slot": run.id_slot}
            if d.usage is not None:
                frame["tokens_predicted"] = d.usage.completion_tokens
                frame["tokens_evaluated"] = d.usage.prompt_tokens
                if body.timings_per_token:
                    frame["timings"] = llama_timings(d.usage)
            if want_lp:
                frame["completion_probabilities"] = probabilities(d.logprobs)
            yield select(frame, body.response_fields)
        if d.finish_reason is not None:
            yield run.final(base + d.index, "", [], d.usage or Usage(), d.finish_reason, d.stop_word, None,
                            d.index == 0)


async def merged(opened: list[tuple[Run, GenerationStream]], n_cmpl: int) -> AsyncIterator[dict[str, Any]]:
    """Several prompts streamed at once: their frames as they come, told apart by `index`."""
    if len(opened) == 1:
        async for f in frames(*opened[0]):
            yield f
        return
    queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()

    async def pump(run: Run, stream: GenerationStream, base: int) -> None:
        try:
            async for f in frames(run, stream, base):
                queue.put_nowait(f)
            queue.put_nowait(None)
        except Exception as e:  # the stream's failure ends the whole response, as an error frame
            queue.put_nowait(e)

    tasks = [asyncio.create_task(pump(r, st, i * n_cmpl)) for i, (r, st) in enumerate(opened)]
    try:
        open_ = len(tasks)
        while open_:
            item = await queue.get()
            if item is None:
                open_ -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()


# ---- routes -----------------------------------------------------------------------------------
router = APIRouter()


async def _open(svc: InferenceService, body: CompletionBody, piece: Piece,
                bias: dict[int, float], admit: bool = True) -> tuple[GenerateRequest, GenerationStream, str]:
    req = generate_request(body, await tokens_of(svc, body.model, piece), bias)
    stream = await svc.open_generation(req, admit)
    try:
        _, text = await svc.detokenize(stream.model, stream.prompt_tokens)
    except BaseException:
        await stream.aclose()
        raise
    return req, stream, text


async def _complete(svc: InferenceService, body: CompletionBody, piece: Piece, bias: dict[int, float],
                    base: int) -> list[dict[str, Any]]:
    req, stream, text = await _open(svc, body, piece, bias)
    try:
        g = await collect(stream)
        return results(Run(body, req, stream, text), g, base)
    finally:
        await stream.aclose()


@router.post("/completion")
@router.post("/completions")
async def completion(body: CompletionBody, request: Request, svc: InferenceService = Depends(get_service)):
    """One prompt: one result object (a stream of frames with "stream": true). Several
    prompts: a list of results, decoded together."""
    check_supported(body)
    sampler_order(body.samplers)  # a bad name is a 400 before any work
    prompts = split_prompts(body.prompt)
    bias = await logit_bias(svc, body.model, body.logit_bias)
    if body.stream:
        stack = contextlib.AsyncExitStack()
        try:
            opened = await cancel_on_disconnect(request, _open_all(svc, body, prompts, bias, stack))
        except BaseException:
            await stack.aclose()
            raise
        return sse_response(merged(opened, body.n_cmpl), stack.aclose, "llamacpp", done=False)
    n = body.n_cmpl
    out = [r for rs in await cancel_on_disconnect(request, _all(svc, body, prompts, bias)) for r in rs]
    return out[0] if len(prompts) == 1 and n == 1 else out


async def _open_all(svc: InferenceService, body: CompletionBody, prompts: list[Piece], bias: dict[int, float],
                    stack: contextlib.AsyncExitStack) -> list[tuple[Run, GenerationStream]]:
    """Open every prompt's generation (every request error before the first byte). Several
    prompts take one admission grant for all of them, held (in `stack`) until the response
    ends: one slot each, taken one by one, could wait for slots this same response holds."""
    several = len(prompts) > 1
    if several:
        await stack.enter_async_context(svc.admission.slot(weight=len(prompts)))
    opened: list[tuple[Run, GenerationStream]] = []
    for p in prompts:
        req, stream, text = await _open(svc, body, p, bias, admit=not several)
        stack.push_async_callback(stream.aclose)
        opened.append((Run(body, req, stream, text), stream))
    return opened


async def _all(svc: InferenceService, body: CompletionBody, prompts: list[Piece],
               bias: dict[int, float]) -> list[list[dict[str, Any]]]:
    """Every prompt at once; the first failure cancels the others and is the response."""
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(_complete(svc, body, p, bias, i * body.n_cmpl)) for i, p in enumerate(prompts)]
    except BaseExceptionGroup as eg:
        raise eg.exceptions[0] from None
    return [t.result() for t in tasks]
