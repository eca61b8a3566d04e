"""Generation verbs: chat and completion (streamed or not), batches, tokenize/detokenize, /stop.

A request's way: resolve the generator (404 / 400), take an admission slot, hold the loaded
model, then on a thread: render the chat template, tokenize, check the context, build the
sampler chain (every 400 happens here, before any byte is streamed). The job then joins
the model's continuous-batching engine; its deltas come back to this event loop through
`call_soon_threadsafe`. The admission slot and the model stay held until the stream is
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

from inferd.chat.templates import render_chat
from inferd.errors import Cancelled, ContextOverflow, InferdError, InferenceFailed, InvalidInput
from inferd.metrics import Metrics
from inferd.models import ModelKind, ModelSpec
from inferd.observability.context import note_generation
from inferd.registry.registry import Registry
from inferd.scheduling.admission import Admission
from inferd.scheduling.generation import Job
from inferd.service.chat import ChatOutput, plan_request
from inferd.service.core import Catalog
from inferd.service.handles import GeneratorHandle, GeneratorRuntime
from inferd.service.limits import check_engine_limits
from inferd.service.lora import LoraService
from inferd.types import Delta, GenerateRequest, Generation, TokenLogprob, Usage

log = logging.getLogger("inferd.generation")

GEN = [ModelKind.GENERATOR]


@dataclass
class Prepared:
    prompt: list[int]
    sampler: Any
    max_tokens: int
    output: ChatOutput | None = None  # chat requests: splits reasoning / answer / tool calls


def prepare(rt: GeneratorRuntime, req: GenerateRequest) -> Prepared:
    """Prompt tokens, sampler and token budget for `req` on runtime `rt`. Runs on a thread:
    template rendering and tokenizing a long prompt are CPU work. Chat options (tools,
    structured output, thinking) are planned here, so all their 400s come first too."""
    template = req.chat_template or rt.chat_template
    use_template = req.messages is not None and bool(template or not req.template_fallback)
    plan = plan_request(req, template if use_template else None)
    text = ""
    if use_template:
        messages, kwargs = req.messages, dict(req.template_kwargs)
        if plan is not None:
            messages = plan.messages
            kwargs.update(plan.template_kwargs)
        tools = kwargs.pop("tools", None)
        text = render_chat(template, messages, bos_token=rt.bos_text, eos_token=rt.eos_text,
                           add_generation_prompt=req.add_generation_prompt, tools=tools, **kwargs)
        tokens = rt.tokenize_rendered(text)
    elif req.messages is not None:  # no template, and plain text is acceptable
        text = "\n\n".join(str(m.get("content") or "") for m in req.messages)
        tokens = rt.tokenize(text, add_special=not req.prefix_tokens, parse_special=True)
    elif isinstance(req.prompt, list):
        rt.check_tokens(req.prompt, "prompt")
        tokens = list(req.prompt)
    else:
        text = req.prompt or ""
        tokens = rt.tokenize(text, add_special=req.add_special and not req.prefix_tokens, parse_special=True)
    if req.prefix_tokens:
        rt.check_tokens(req.prefix_tokens, "context")
        tokens = list(req.prefix_tokens) + tokens
    if not tokens:
        raise InvalidInput("the prompt is empty", "prompt")
    n_ctx = min(rt.n_ctx_seq, req.num_ctx) if req.num_ctx else rt.n_ctx_seq
    if len(tokens) >= n_ctx:
        raise ContextOverflow(f"the prompt has {len(tokens)} tokens, but model '{req.model}' has a context "
                              f"window of {n_ctx} tokens", "messages" if req.messages is not None else "prompt")
    room = n_ctx - len(tokens)
    max_tokens = room if req.max_tokens is None else req.max_tokens
    if max_tokens < 0:
        raise InvalidInput("max_tokens must be >= 0", "max_tokens")
    if max_tokens > room:
        if not req.clamp_to_context:
            raise ContextOverflow(f"model '{req.model}' has a context window of {n_ctx} tokens; the prompt "
                                  f"uses {len(tokens)} and max_tokens asks for {max_tokens} more "
                                  f"({len(tokens) + max_tokens} in all)", "max_tokens")
        max_tokens = room
    sampling, output = req.sampling, None
    if plan is not None:
        grammar = plan.grammar(text)  # checked by the plan (raw GBNF) or built valid (schemas)
        if grammar is not None:
            sampling = dataclasses.replace(sampling, grammar=grammar)
        output = ChatOutput(plan.output_parser(text))
    elif sampling.grammar is not None:
        from inferd.chat.gbnf import check_gbnf  # llama.cpp aborts the process on some bad grammars

        check_gbnf(sampling.grammar)
    return Prepared(tokens, rt.make_sampler(sampling), max_tokens, output)


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
        self._queue: asyncio.Queue[Delta] = asyncio.Queue()
        self._stack, self._owner = stack, owner
        self.finished = False
        self.closed = False

    def sink(self, loop: asyncio.AbstractEventLoop):
        put = self._queue.put_nowait
        return lambda d: loop.call_soon_threadsafe(put, d)

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
            self.finished = True
            if d.usage is not None:  # /metrics inferd_tokens_total
                self._owner.metrics.add_tokens(self.model, d.usage.prompt_tokens, d.usage.completion_tokens)
                j = self.job
                if j is not None:  # x-compute-tokens, the trace's prefill and decode spans
                    note_generation(d.usage.prompt_tokens, d.usage.completion_tokens, j.t_admitted, j.t_first,
                                    j.t_last)
        if self.output is not None:
            self.output.apply(d)
        return d

    def cancel(self) -> None:
        if self.job is not None and not self.finished:
            self.handle.engine.cancel(self.job)

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
                 metrics: Metrics):
        self.catalog, self.registry, self.admission, self.lora, self.metrics = (
            catalog, registry, admission, lora, metrics)
        self.streams: set[GenerationStream] = set()  # running generations, for /stop

    def spec(self, model: str | None) -> ModelSpec:
        """An omitted model means the only generator; with several it must be named."""
        return self.catalog.resolve(model, ModelKind.GENERATOR)

    async def open(self, req: GenerateRequest, admit: bool = True) -> GenerationStream:
        """Start a generation; every request error is raised here, before a stream exists."""
        arrived = time.perf_counter()
        check_engine_limits(req)
        spec = self.spec(req.model)
        req.model = spec.name
        stack = contextlib.AsyncExitStack()
        try:
            if admit:
                await stack.enter_async_context(self.admission.slot())
            t0 = time.perf_counter()
            handle = await stack.enter_async_context(self.registry.use(spec.name, GEN, keep_alive=req.keep_alive))
            assert isinstance(handle, GeneratorHandle)
            await self.lora.ensure(spec, handle)  # a reloaded model gets its adapter back
            stream = GenerationStream(req, spec, handle, stack, self, time.perf_counter() - t0)
            p = await asyncio.to_thread(prepare, handle.backend, req)
            stream.prompt_tokens, stream.output = p.prompt, p.output
            stream.job = Job(prompt=p.prompt, sampler=p.sampler, max_tokens=p.max_tokens, stop=list(req.stop),
                             top_logprobs=req.sampling.top_logprobs if req.sampling.logprobs else None,
                             sink=stream.sink(asyncio.get_running_loop()), arrived=arrived, stream=req.stream)
            try:
                handle.engine.submit(stream.job)
            except BaseException:
                p.sampler.close()
                raise
        except BaseException:
            await stack.aclose()
            raise
        self.streams.add(stream)
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

    async def load(self, model: str | None, keep_alive: float | None = None) -> ModelSpec:
        """Load (or, with keep_alive 0, unload) a generator without generating: Ollama's
        empty-prompt request."""
        spec = self.spec(model)
        if keep_alive == 0:
            await self.registry.unload(spec.name)
            return spec
        async with self.registry.use(spec.name, GEN, keep_alive=keep_alive):
            pass
        return spec

    async def tokenize(self, model: str | None, content: str, add_special: bool = False,
                       parse_special: bool = True) -> tuple[str, list[int], list[bytes]]:
        """-> (model, token ids, the bytes of each token)."""
        spec = self.spec(model)
        async with self.registry.use(spec.name, GEN) as handle:
            rt = handle.backend
            ids = await asyncio.to_thread(rt.tokenize, content, add_special, parse_special)
            return spec.name, ids, [rt.token_bytes(t) for t in ids]

    async def detokenize(self, model: str | None, tokens: list[int]) -> tuple[str, str]:
        spec = self.spec(model)
        async with self.registry.use(spec.name, GEN) as handle:
            rt = handle.backend
            rt.check_tokens(tokens, "tokens")
            return spec.name, await asyncio.to_thread(rt.detokenize, tokens)

    def stop(self, model: str | None = None) -> int:
        """Cancel the active streams of `model` (or of every model). Non-streamed requests
        are left to finish, as in GenAIServer. Returns how many were cancelled."""
        if model:
            self.catalog.resolve(model, ModelKind.GENERATOR)
        hit = [s for s in self.streams if s.req.stream and not s.finished and (not model or s.model == model)]
        for s in hit:
            s.cancel()
        return len(hit)


async def collect(stream: GenerationStream) -> Generation:
    """Drain a stream into one Generation."""
    parts: list[str] = []
    thought: list[str] = []
    calls: list = []
    tokens: list[int] = []
    logprobs: list[TokenLogprob] = []
    usage, reason = Usage(), None
    async for d in stream:
        parts.append(d.text)
        thought.append(d.reasoning)
        calls.extend(d.tool_calls)
        tokens.extend(d.tokens)
        logprobs.extend(d.logprobs)
        if d.usage is not None:
            usage = d.usage
        reason = d.finish_reason or reason
    if reason == "cancelled":
        raise Cancelled()
    return Generation(model=stream.model, text="".join(parts), finish_reason=reason or "stop", usage=usage,
                      reasoning="".join(thought) or None, tool_calls=calls,
                      tokens=tokens, prompt_tokens=stream.prompt_tokens,
                      logprobs=logprobs if stream.req.sampling.logprobs else None, created=stream.created)


__all__ = ["GenerationService", "GenerationStream", "collect", "prepare"]
