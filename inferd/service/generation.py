"""Generation verbs: chat and completion (streamed or not), batches, tokenize/detokenize, /stop.

A request's way: resolve the generator (404 / 400), take an admission slot, hold the loaded
model, then on a thread: render the chat template, tokenize, check the context, build the
sampler chain (every 400 happens here, before any byte is streamed). The job then joins
the model's continuous-batching engine; its deltas come back to this event loop through a
`LoopMailbox` (mailbox.py: one wake-up of the loop per engine step, the final one only for a
request that is not streamed). The admission slot and the model stay held until the stream is
closed, which also cancels the sequence if it has not finished (client gone, /stop)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from inferd.kinds import GENERATOR
from inferd.chat.gbnf import check_gbnf
from inferd.chat.plan import ChatPlan
from inferd.chat.reasoning import prompt_opens_reasoning
from inferd.chat.sandbox import RenderLimits, render_limits
from inferd.chat.templates import render_chat
from inferd.errors import Cancelled, CapabilityMissing, ContextOverflow, InferdError, InferenceFailed, InvalidInput
from inferd.metrics import Metrics
from inferd.models import ModelKind, ModelSpec
from inferd.observability.context import note_generation, note_work
from inferd.registry.registry import Registry
from inferd.scheduling.admission import Admission
from inferd.scheduling.generation import Job
from inferd.scheduling.speculation import Speculation
from inferd.scheduling.thinking import ThinkingBudget
from inferd.scheduling.media import MediaAdmission, decode_all
from inferd.service.chat import ChatOutput, plan_request
from inferd.service.core import Catalog
from inferd.service.fim import check_fim, infill_tokens
from inferd.service.handles import GeneratorHandle, GeneratorRuntime
from inferd.service.limits import check_engine_limits
from inferd.service.lora import LoraService
from inferd.service.mailbox import LoopMailbox
from inferd.service.speculation import check_controls, loads_a_draft, plan_speculation
from inferd.service.prep import PrepPool, cancel_flag, checkpoint
from inferd.service.vision import image_refs, require_vision, to_images, with_markers, without_images
from inferd.types import Delta, GenerateRequest, Generation, Image, TokenLogprob, Usage, total_usage

log = logging.getLogger("inferd.generation")

MAX_SHIFTED_CONTEXTS = 16


@dataclass
class Prepared:
    prompt: list[int]
    sampler: Any
    max_tokens: int
    output: ChatOutput | None = None  # chat requests: splits reasoning / answer / tool calls
    # n > 1: a sampler and an output parser for each further choice
    more: list[tuple[Any, ChatOutput | None]] = dataclasses.field(default_factory=list)
    media: dict[int, Any] = dataclasses.field(default_factory=dict)  # image spans (engine's Job.media)
    thinking: dict[str, Any] | None = None  # ThinkingBudget arguments, one tracker per choice


def prepare(rt: GeneratorRuntime, req: GenerateRequest, images: list[Image] | None = None,
            default_budget: int | None = None) -> Prepared:
    """Prompt tokens, sampler and token budget for `req` on runtime `rt`. Runs on a thread:
    template rendering and tokenizing a long prompt are CPU work. Chat options (tools,
    structured output, thinking) are planned here, so all their 400s come first too.
    `images`: the admitted, decoded images of the messages' image parts, in order; each part
    becomes the projector's media marker in the rendered text. `default_budget`: the
    server's --reasoning-budget, for requests that name none."""
    if images:
        marker = rt.media_marker
        if marker is None:
            raise CapabilityMissing(f"model '{req.model}' cannot read images (no vision projector)")
        req = dataclasses.replace(req, messages=with_markers(req.messages or [], marker))
    media: dict[int, Any] = {}
    try:
        return _prepare(rt, req, images, media, default_budget)
    except RecursionError as e:  # a pathological nesting a bounded check did not catch
        _close_media(media)
        raise InvalidInput("the request is nested too deeply to process") from e
    except UnicodeError as e:  # a lone surrogate ("\ud800") is no text a model can read
        _close_media(media)
        raise InvalidInput(f"the request holds text that is not valid Unicode ({getattr(e, 'reason', e)})") from e
    except BaseException:
        for chunk in media.values():  # native image data of a request that failed here
            chunk.close()
        raise


def _close_media(media: dict[int, Any]) -> None:
    for chunk in media.values():
        chunk.close()
    media.clear()


# Template variables the server sets itself; chat_template_kwargs may not replace them.
RESERVED_TEMPLATE_KWARGS = frozenset({"template", "messages", "bos_token", "eos_token", "add_generation_prompt"})
CHARS_PER_TOKEN_CAP = 32     # a rendered prompt longer than n_ctx * this cannot fit the context
MIN_RENDER_CHARS = 1 << 16
TEMPLATE_SECONDS = 10.0


def _prepare(rt: GeneratorRuntime, req: GenerateRequest, images: list[Image] | None,
             media: dict[int, Any], default_budget: int | None = None) -> Prepared:
    # Runs on the prep pool (service/prep.py), inside the request's admission slot. Every stage
    # is bounded (message count and rendered size tied to the context, a render deadline) and
    # checks for cancellation (client gone) before it starts.
    n_ctx = min(rt.n_ctx_seq, req.num_ctx) if req.num_ctx else rt.n_ctx_seq
    if req.messages is not None and len(req.messages) > n_ctx:
        raise ContextOverflow(f"{len(req.messages)} messages cannot fit a context window of {n_ctx} tokens",
                              "messages")
    bad = RESERVED_TEMPLATE_KWARGS & set(req.template_kwargs)
    if bad:
        raise InvalidInput(f"chat_template_kwargs may not set {sorted(bad)[0]!r}: the server sets it",
                           "chat_template_kwargs")
    checkpoint()
    template = req.chat_template or rt.chat_template
    use_template = req.messages is not None and bool(template or not req.template_fallback)
    plan = plan_request(req, template if use_template else None, default_budget)
    text = ""
    checkpoint()
    if req.infill is not None:  # fill-in-the-middle: the model's FIM tokens around the parts (fim.py)
        check_fim(req.model, rt.fim_tokens, req.infill_param)
        tokens = infill_tokens(lambda t: rt.tokenize(t, add_special=False, parse_special=False), rt.fim_tokens,
                               rt.bos_token, req.infill, rt.n_batch, n_ctx, req.max_tokens or 0)
    elif use_template:
        messages, kwargs = req.messages, dict(req.template_kwargs)
        if plan is not None:
            messages = plan.messages
            kwargs.update(plan.template_kwargs)
        tools = kwargs.pop("tools", None)
        limits = RenderLimits(max_chars=max(MIN_RENDER_CHARS, n_ctx * CHARS_PER_TOKEN_CAP),
                              deadline=time.monotonic() + TEMPLATE_SECONDS, cancelled=cancel_flag())
        with render_limits(limits):
            text = render_chat(template, messages or [], bos_token=rt.bos_text, eos_token=rt.eos_text,
                               add_generation_prompt=req.add_generation_prompt, tools=tools, **kwargs)
        checkpoint()
        if images:
            tokens, spans = rt.tokenize_multimodal(text, images)
            media.update(spans)
        else:
            tokens = rt.tokenize_rendered(text)
    elif images:
        raise CapabilityMissing(f"model '{req.model}' has no chat template to place images in")
    elif req.messages is not None:  # no template, and plain text is acceptable
        text = "\n\n".join(str(m.get("content") or "") for m in req.messages)
        tokens = rt.tokenize(text, add_special=not req.prefix_tokens, parse_special=True)
    elif isinstance(req.prompt, list):
        rt.check_tokens(req.prompt, "prompt")
        tokens = list(req.prompt)
    else:
        text = req.prompt or ""
        tokens = rt.tokenize(text, add_special=req.add_special and not req.prefix_tokens, parse_special=True)
    checkpoint()
    if req.prefix_tokens:
        rt.check_tokens(req.prefix_tokens, "context")
        tokens = list(req.prefix_tokens) + tokens
    if not tokens:
        raise InvalidInput("the prompt is empty", "prompt")
    if len(tokens) >= n_ctx:
        raise ContextOverflow(f"the prompt has {len(tokens)} tokens, but model '{req.model}' has a context "
                              f"window of {n_ctx} tokens", "messages" if req.messages is not None else "prompt")
    room = n_ctx - len(tokens)
    max_tokens = room if req.max_tokens is None else req.max_tokens
    if max_tokens < 0:
        raise InvalidInput("max_tokens must be >= 0", "max_tokens")
    if req.engine.cache_compaction_ratio > 0 and max_tokens > MAX_SHIFTED_CONTEXTS * n_ctx:  # shifts never end
        raise InvalidInput(f"max_tokens: at most {MAX_SHIFTED_CONTEXTS * n_ctx} ({MAX_SHIFTED_CONTEXTS} contexts "
                           f"of {n_ctx}) with cache_compaction_ratio", "max_tokens")
    if max_tokens > room and req.engine.cache_compaction_ratio <= 0:  # > 0: the context shifts and goes on
        if not req.clamp_to_context:
            raise ContextOverflow(f"model '{req.model}' has a context window of {n_ctx} tokens; the prompt "
                                  f"uses {len(tokens)} and max_tokens asks for {max_tokens} more "
                                  f"({len(tokens) + max_tokens} in all)", "max_tokens")
        max_tokens = room
    sampling = req.sampling
    if sampling.penalty_last_n > n_ctx:  # a window past the context only costs memory (Ollama repeat_last_n)
        sampling = dataclasses.replace(sampling, penalty_last_n=n_ctx)
    if not 1 <= req.n <= max(1, getattr(rt, "n_seq", 1)):
        raise InvalidInput(f"n must be between 1 and {getattr(rt, 'n_seq', 1)} (the sequences model "
                           f"'{req.model}' runs at once)", "n")
    slot, n_seq = req.engine.slot, max(1, getattr(rt, "n_seq", 1))
    if slot is not None and not 0 <= slot < n_seq:
        raise InvalidInput(f"id_slot {slot} does not exist: model '{req.model}' has {n_seq} slots "
                           f"(0 to {n_seq - 1}, or -1 for any)", "id_slot")
    if plan is not None:
        grammar = plan.grammar(text, endless=sampling.ignore_eos)  # checked (raw GBNF) or built valid
        if grammar is not None:
            sampling = dataclasses.replace(sampling, grammar=grammar,
                                           grammar_endless=sampling.ignore_eos and plan.endless_grammar)
    checkpoint()
    if sampling.grammar is not None:
        # llama.cpp aborts the process on grammars no token of this vocabulary can follow
        check_gbnf(sampling.grammar, vocab=getattr(rt, "grammar_vocab", None))
    checkpoint()
    made = []
    try:
        for i in range(req.n):
            # Each choice its own seed (seed + i): with one seed, n choices would be one choice n times.
            sp = sampling if i == 0 or sampling.seed is None else dataclasses.replace(sampling, seed=sampling.seed + i)
            made.append((rt.make_sampler(sp), ChatOutput(plan.output_parser(text)) if plan is not None else None))
    except BaseException:
        for s, _ in made:
            s.close()
        raise
    (sampler, output), *more = made
    return Prepared(tokens, sampler, max_tokens, output, more, dict(media),
                    _thinking(rt, plan, text) if plan is not None and use_template else None)


def _thinking(rt: GeneratorRuntime, plan: ChatPlan, prompt: str) -> dict[str, Any] | None:
    """What the engine needs to count (and, with a budget, to bound) the thinking block."""
    m = plan.thinking.markers
    if m is None:
        return None
    close_ids = rt.tokenize(m.close, add_special=False, parse_special=True) if plan.thinking.budget is not None else []
    return {"open": m.open.encode(), "close_marker": m.close.encode(), "close_ids": close_ids,
            "budget": plan.thinking.budget, "in_block": prompt_opens_reasoning(prompt, m)}


class GenerationStream:
    """The deltas of one running generation. Iterate it; always `aclose()` it (the API
    layer does, on completion and on disconnect): that cancels an unfinished sequence and
    releases the admission slot and the model."""

    def __init__(self, req: GenerateRequest, spec: ModelSpec, handle: GeneratorHandle,
                 stack: contextlib.AsyncExitStack, owner: "GenerationService", load_seconds: float):
        self.id = uuid.uuid4().hex[:24]
        self.req, self.spec, self.handle = req, spec, handle
        self.model = spec.name
        self.created = req.created
        self.load_seconds = load_seconds
        self.prompt_tokens: list[int] = []
        self.job: Job | None = None
        self.output: ChatOutput | None = None
        self.speculation: Speculation | None = None
        self.outputs: list[ChatOutput | None] = []  # per choice (n > 1); [0] is `output`
        self._open = max(1, req.n)  # choices not finished yet
        self._completion = 0  # tokens generated by every choice so far
        self._queue: asyncio.Queue[Delta] = asyncio.Queue()
        self._stack, self._owner = stack, owner
        self.finished = False
        self.closed = False

    def sink(self, loop: asyncio.AbstractEventLoop, index: int = 0):
        put, box, each = self._queue.put_nowait, LoopMailbox.of(loop), self.req.stream

        def deliver(d: Delta) -> None:
            d.index = index
            box.post(put, d, wake=each or d.finish_reason is not None or d.error is not None)
        return deliver

    def __aiter__(self) -> "GenerationStream":
        return self

    async def __anext__(self) -> Delta:
        if self.finished:
            raise StopAsyncIteration
        d = await self._queue.get()
        if d.usage is not None:
            d.usage.load_seconds = self.load_seconds
        if d.error is not None:
            self.finished = True
            raise d.error if isinstance(d.error, InferdError) else InferenceFailed(str(d.error))
        if d.finish_reason is not None:
            self._open -= 1
            self.finished = self._open <= 0
            if d.usage is not None:  # /metrics inferd_tokens_total (the prompt counted once)
                self._owner.metrics.add_tokens(self.model, d.usage.prompt_tokens if d.index == 0 else 0,
                                               d.usage.completion_tokens)
                self._completion += d.usage.completion_tokens
                j = self.job
                if j is not None and self.finished:  # x-compute-tokens, the trace's prefill and decode spans
                    note_generation(d.usage.prompt_tokens, self._completion, j.t_admitted, j.t_first,
                                    max(x.t_last for x in j.group))
        output = self.outputs[d.index] if d.index < len(self.outputs) else self.output
        if output is not None:
            output.apply(d)
        return d

    def cancel(self) -> None:
        if self.job is not None and not self.finished:
            self.handle.scheduler.cancel(self.job)

    def generated(self) -> int:
        """Tokens generated so far by every choice (read from the engine's thread's lists)."""
        j = self.job
        return sum(len(x.generated) for x in j.group) if j is not None else 0

    def waiting(self) -> bool:
        """Submitted, but no engine slot has taken it yet (all slots busy)."""
        return self.job is not None and self.job.slot is None and not self.finished

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.cancel()
        self._owner.streams.discard(self)
        await self._stack.aclose()


class GenerationService:
    """Chat and completion on the generators' engines. Dependencies are explicit: the
    catalog resolves names, the registry holds loaded handles, admission bounds the work,
    LoRA choices are re-applied to reloaded models, metrics count tokens."""

    def __init__(self, catalog: Catalog, registry: Registry, admission: Admission, lora: LoraService,
                 metrics: Metrics, media: MediaAdmission | None = None, prep: PrepPool | None = None,
                 reasoning_budget: int | None = None):
        self.catalog, self.registry, self.admission, self.lora, self.metrics = (
            catalog, registry, admission, lora, metrics)
        self.reasoning_budget = reasoning_budget  # --reasoning-budget: requests that name none (-1: unbounded)
        self.prep = prep or PrepPool(4)  # templates, tokenizing, grammars: bounded, cancellable
        self.media = media  # image budgets (scheduling/media.py); None: images are refused
        self.streams: set[GenerationStream] = set()  # running generations, for /stop
        # openai-server's behaviour (--ignore-images-without-projector): image parts sent to a
        # model without a projector are dropped with a warning instead of the 400
        self.ignore_images_without_projector = False

    def spec(self, model: str | None) -> ModelSpec:
        """An omitted model means the only generator; with several it must be named."""
        return self.catalog.resolve(model, ModelKind.GENERATOR)

    async def open(self, req: GenerateRequest, admit: bool = True) -> GenerationStream:
        """Start a generation; every request error is raised here, before a stream exists."""
        arrived = time.perf_counter()
        check_engine_limits(req)
        served = req.model
        base, adapter = self.lora.split_model(req.model)  # `base:adapter` serves that adapter (lora.py)
        if adapter is not None:
            if req.lora is not None:
                raise InvalidInput(f"model '{req.model}' names an adapter already; send 'lora' with the base "
                                   f"model '{base}' instead", "lora")
            req.model, req.lora = base or "", [adapter]
        spec = self.spec(req.model)
        req.model = spec.name
        refs = image_refs(req.messages)
        if refs and self.ignore_images_without_projector and "vision" not in spec.capabilities:
            log.warning("model '%s' has no vision projector: ignoring %d image part(s) of the request",
                        spec.name, len(refs))
            req.messages, refs = without_images(req.messages or []), []
        require_vision(spec, refs)  # 400 naming the capability, before any work
        stack = contextlib.AsyncExitStack()
        images: list[Image] = []
        try:
            if admit:
                weight = self.media.weight(refs) if refs and self.media is not None else 1
                await stack.enter_async_context(self.admission.slot(weight=weight))
            if refs:  # bytes, headers and pixels admitted, images decoded: all before the model loads
                if self.media is None:
                    raise CapabilityMissing("this server takes no images")
                grant = await stack.enter_async_context(self.media.admit(refs))
                images = to_images(await decode_all(grant))
            t0 = time.perf_counter()
            handle = await stack.enter_async_context(self.registry.use(spec.name, GENERATOR, keep_alive=req.keep_alive))
            assert isinstance(handle, GeneratorHandle)
            if req.lora is None:  # a reloaded model gets its default set back (its own set: not its concern)
                await self.lora.ensure(spec, handle)
            adapters = await self.lora.for_request(spec, handle, req.lora)
            stream = GenerationStream(req, spec, handle, stack, self, time.perf_counter() - t0)
            if adapter is not None:  # responses name the adapter's own model, as vLLM's do
                stream.model = served or spec.name
            ctl = req.engine
            check_controls(ctl, spec, handle)
            stream.speculation = (await asyncio.to_thread(plan_speculation, ctl, spec, handle, self.catalog)
                                  if loads_a_draft(ctl, spec) else plan_speculation(ctl, spec, handle, self.catalog))
            if stream.speculation.implicit and not req.sampling.greedy:
                stream.speculation.disabled_reason = "sampled"  # by default only greedy requests draft
            sp = stream.speculation if stream.speculation.disabled_reason is None else None
            p = await self.prep.run(prepare, handle.runtime, req, images, self.reasoning_budget)
            stream.prompt_tokens, stream.output = p.prompt, p.output
            stream.outputs = [p.output] + [o for _s, o in p.more]
            loop = asyncio.get_running_loop()

            def job(sampler: Any, index: int) -> Job:
                return Job(prompt=p.prompt, sampler=sampler, max_tokens=p.max_tokens, stop=list(req.stop),
                           top_logprobs=req.sampling.top_logprobs if req.sampling.logprobs else None,
                           sink=stream.sink(loop, index), arrived=arrived, stream=req.stream,
                           prompt_cache=ctl.prompt_cache, cache_key=ctl.prompt_cache_key,
                           compaction=ctl.cache_compaction_ratio, pin_slot=ctl.slot if index == 0 else None,
                           adapters=adapters, own_adapters=adapters is not None,
                           return_progress=req.return_progress and req.stream and index == 0,
                           thinking=ThinkingBudget(**p.thinking) if p.thinking is not None else None,
                           # each choice drafts on its own; the response reports the first's
                           speculation=(sp if index == 0 else dataclasses.replace(sp)) if sp is not None else None)
            stream.job = job(p.sampler, 0)
            stream.job.media = p.media  # the first choice prefills the images; siblings fork its cells
            stream.job.siblings = [job(s, i) for i, (s, _o) in enumerate(p.more, start=1)]
            try:
                handle.scheduler.submit(stream.job)
            except BaseException:
                for j in stream.job.group:
                    j.sampler.close()
                raise
        except BaseException:
            await stack.aclose()
            raise
        self.streams.add(stream)
        note_work(stream)
        return stream

    async def generate(self, req: GenerateRequest, admit: bool = True) -> Generation:
        stream = await self.open(req, admit)
        try:
            return await collect(stream)
        finally:
            await stream.aclose()

    async def generate_batch(self, reqs: list[GenerateRequest | InferdError]) -> list[Generation | InferdError]:
        """Many generations; they decode together in each model's engine. Admission counts
        what the batch really puts on the engines: one slot per item (all granted before any
        item starts, in one queue position, so batches cannot starve each other). An item's
        failure is its own result; the others go on."""

        async def one(r: GenerateRequest | InferdError) -> Generation | InferdError:
            if isinstance(r, InferdError):
                return r
            try:
                return await self.generate(r, admit=False)
            except InferdError as e:
                return e

        work = sum(1 for r in reqs if not isinstance(r, InferdError))
        async with self.admission.slot(weight=max(1, work)):
            return list(await asyncio.gather(*(one(r) for r in reqs)))

    async def count_prompt_tokens(self, req: GenerateRequest) -> tuple[str, int]:
        """-> (model, the prompt tokens `req` would use): rendered with its template, tools and
        thinking exactly as a generation would be (every 400 the same), without generating.
        Image parts count as their text markers; the images themselves are not decoded."""
        check_engine_limits(req)
        spec = self.spec(req.model)
        req.model = spec.name
        async with self.admission.slot(), self.registry.use(spec.name, GENERATOR) as handle:
            assert isinstance(handle, GeneratorHandle)

            def count(rt: GeneratorRuntime) -> int:
                p = prepare(rt, req)
                for sampler in [p.sampler, *(s for s, _o in p.more)]:
                    sampler.close()
                _close_media(p.media)
                return len(p.prompt)

            return spec.name, await self.prep.run(count, handle.runtime)

    async def load(self, model: str | None, keep_alive: float | None = None) -> ModelSpec:
        """Load (or, with keep_alive 0, unload) a generator without generating: Ollama's
        empty-prompt request."""
        spec = self.spec(model)
        if keep_alive == 0:
            await self.registry.unload(spec.name)
            return spec
        async with self.registry.use(spec.name, GENERATOR, keep_alive=keep_alive):
            pass
        return spec

    async def tokenize(self, model: str | None, content: str, add_special: bool = False,
                       parse_special: bool = True) -> tuple[str, list[int], list[bytes]]:
        """-> (model, token ids, the bytes of each token)."""
        spec = self.spec(model)
        async with self.registry.use(spec.name, GENERATOR) as handle:
            rt = handle.runtime
            ids = await self.prep.run(rt.tokenize, content, add_special, parse_special)
            return spec.name, ids, [rt.token_bytes(t) for t in ids]

    async def detokenize(self, model: str | None, tokens: list[int]) -> tuple[str, str]:
        spec = self.spec(model)
        async with self.registry.use(spec.name, GENERATOR) as handle:
            rt = handle.runtime
            rt.check_tokens(tokens, "tokens")
            return spec.name, await self.prep.run(rt.detokenize, tokens)

    def stop(self, model: str | None = None) -> int:
        """Cancel the active streams of `model` (or of every model). Non-streamed requests
        are left to finish, as in GenAIServer. Returns how many were cancelled."""
        if model:
            self.catalog.resolve(model, ModelKind.GENERATOR)
        hit = [s for s in self.streams if s.req.stream and not s.finished and (not model or s.spec.name == model)]
        for s in hit:
            s.cancel()
        return len(hit)


@dataclass
class _Acc:
    """One choice's deltas, gathered."""

    parts: list[str] = dataclasses.field(default_factory=list)
    thought: list[str] = dataclasses.field(default_factory=list)
    calls: list = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[TokenLogprob] = dataclasses.field(default_factory=list)
    usage: Usage = dataclasses.field(default_factory=Usage)
    reason: Any = None
    stop_word: str | None = None


async def collect(stream: GenerationStream) -> Generation:
    """Drain a stream into one Generation (n > 1: the others in `choices`)."""
    accs = [_Acc() for _ in range(max(1, stream.req.n))]
    async for d in stream:
        a = accs[d.index]
        a.parts.append(d.text)
        a.thought.append(d.reasoning)
        a.calls.extend(d.tool_calls)
        a.tokens.extend(d.tokens)
        a.logprobs.extend(d.logprobs)
        if d.usage is not None:
            a.usage = d.usage
        a.reason = d.finish_reason or a.reason
        a.stop_word = d.stop_word or a.stop_word
    if any(a.reason == "cancelled" for a in accs):
        raise Cancelled()
    gens = [Generation(model=stream.model, text="".join(a.parts), finish_reason=a.reason or "stop", usage=a.usage,
                       reasoning="".join(a.thought) or None, tool_calls=a.calls,
                       tokens=a.tokens, prompt_tokens=stream.prompt_tokens,
                       logprobs=a.logprobs if stream.req.sampling.logprobs else None, created=stream.created,
                       index=i, stop_word=a.stop_word) for i, a in enumerate(accs)]
    first = gens[0]
    first.usage, first.choices = total_usage([g.usage for g in gens]), gens[1:]
    first.speculation = stream.speculation.report() if stream.speculation is not None else None
    return first


__all__ = ["GenerationService", "GenerationStream", "collect", "prepare"]
