"""Rewriting with seq2seq models (question generation, query generation, paraphrase,
translation): the `rewrite` verb, the rewriter's handle, and its loader (registered in the
composition root, loading.py), which wraps the leaf runtime in its batcher.

rewrite(): resolve the served name (unknown -> 404, wrong kind -> 400), validate the options
against the model's generation_config.json, take an admission slot, tokenize (an input over
the model's limit is cut and flagged, or refused with truncate=False), then hand every input
to the model's scheduler, which encodes and decodes it together with whatever else is running.
With per_item, a bad input becomes that item's error instead of failing the request."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from inferd.service.input_limits import DEFAULT_MAX_BATCH_INPUTS, check_input_count
from inferd.errors import InferdError, InferenceFailed, InvalidInput, ModelLoadFailed
from inferd.models import ModelKind, ModelSpec
from inferd.runtimes.options import RuntimeOptions

if TYPE_CHECKING:  # the runtime modules import tokenizers/onnxruntime: only when a rewriter loads
    from inferd.registry.registry import Registry
    from inferd.scheduling.admission import Admission
    from inferd.service.core import Catalog
    from inferd.runtimes.seq2seq.decoding import DecodeParams
    from inferd.runtimes.seq2seq.model import Rewriter
    from inferd.scheduling.batcher import Batcher, BatchStats
    from inferd.scheduling.seq2seq import Seq2SeqScheduler, Seq2SeqStats

log = logging.getLogger("inferd.service.rewriting")

MAX_NEW_TOKENS = 1024     # max_tokens ceiling (the decoder's own max_length is the default)
_INLINE_CHARS = 2000      # inputs this small are tokenized on the event loop (tens of microseconds)


@dataclass(frozen=True)
class RewriteOptions:
    """What a request may set (None = the model's generation_config.json, else transformers' default)."""

    max_tokens: int | None = None
    num_beams: int | None = None
    num_return_sequences: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None


@dataclass
class RewriteItem:
    texts: list[str] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    prompt_tokens: int = 0
    truncated: bool = False
    error: InferdError | None = None

    @property
    def completion_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)


@dataclass
class RewriteResult:
    model: str
    items: list[RewriteItem]
    architecture: str | None = None
    load_seconds: float = 0.0

    @property
    def prompt_tokens(self) -> int:
        return sum(i.prompt_tokens for i in self.items if i.error is None)

    @property
    def completion_tokens(self) -> int:
        return sum(i.completion_tokens for i in self.items if i.error is None)


class RewriterHandle:
    """What the registry holds for a loaded rewriter: the runtime and its batcher
    (Seq2SeqScheduler for ONNX, the encoders' Batcher of translate_batch calls for CT2)."""

    def __init__(self, rewriter: "Rewriter", scheduler: "Seq2SeqScheduler | Batcher", ct2: bool,
                 size_bytes: int = 0):
        self.rewriter, self.scheduler, self.ct2, self.size_bytes = rewriter, scheduler, ct2, size_bytes

    @property
    def stats(self) -> "Seq2SeqStats | BatchStats":
        return self.scheduler.stats

    async def generate(self, inputs: list[tuple[int, ...]], params: list["DecodeParams"]) -> list[Any]:
        """Per input: its generated token lists (best first), or its exception."""
        if not self.ct2:
            return await cast("Seq2SeqScheduler", self.scheduler).submit(inputs, params)
        costs = [len(x) * p.num_beams for x, p in zip(inputs, params)]
        gone = [threading.Event() for _ in inputs]  # set when the request leaves: decoding stops
        try:
            return await cast("Batcher", self.scheduler).submit_each(list(zip(inputs, params, gone)), costs)
        except asyncio.CancelledError:
            for g in gone:
                g.set()
            raise

    def close(self) -> None:
        self.scheduler.close()
        self.rewriter.close()


def load_rewriter(spec: ModelSpec, opts: RuntimeOptions | None = None) -> RewriterHandle:
    """(REWRITER, onnx | ctranslate2) -> a rewriter with its scheduler (runs on a worker thread)."""
    from pathlib import Path

    from inferd.runtimes.seq2seq.files import locate
    from inferd.runtimes.seq2seq.model import Rewriter
    from inferd.scheduling.batcher import Batcher
    from inferd.scheduling.seq2seq import Seq2SeqScheduler

    opts = opts or RuntimeOptions(threads=1)
    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    folder = Path(spec.path)
    files = locate(folder, dict(spec.manifest or {}), opts.prefer_quantized)
    threads, budget = opts.threads, opts.max_batch_tokens
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())  # weights, mapped
    if files.layout == "ctranslate2":
        from tokenizers import Tokenizer

        from inferd.runtimes.seq2seq.ct2 import Ct2Seq2Seq

        tk = Tokenizer.from_file(str(files.tokenizer))
        ct2 = Ct2Seq2Seq(files, tk.id_to_token, tk.token_to_id, threads)
        rw = Rewriter(spec.name, files, ct2, MAX_NEW_TOKENS)

        def run(items: list[Any]) -> list[Any]:
            """One translate_batch per group of inputs with the same options, in input order."""
            out: list[Any] = [None] * len(items)
            groups: dict[tuple, list[int]] = {}
            for i, (_, p, _) in enumerate(items):
                groups.setdefault(ct2.key(p), []).append(i)
            for idx in groups.values():
                hyps = ct2.run([items[i][0] for i in idx], items[idx[0]][1], [items[i][2] for i in idx])
                for i, h in zip(idx, hyps):
                    out[i] = h
            return out

        sched: Any = Batcher(run, max_tokens=budget, max_items=opts.max_batch_size, name=spec.name)
    else:
        from inferd.runtimes.seq2seq.onnx_model import OnnxSeq2Seq

        backend = OnnxSeq2Seq(files, threads)
        rw = Rewriter(spec.name, files, backend, MAX_NEW_TOKENS)
        sched = Seq2SeqScheduler(backend, rw.tokenizer.pad_id, max_rows=opts.max_batch_size, max_tokens=budget,
                                 name=spec.name)
    log.info("rewriter %s: %s layout (%s), input limit %d tokens", spec.name, files.layout,
             ", ".join(p.name for p in files.graphs.values()), rw.max_length)
    return RewriterHandle(rw, sched, files.layout == "ctranslate2", size)


class RewritingService:
    """The rewrite verb, with its dependencies passed in."""

    def __init__(self, catalog: "Catalog", registry: "Registry", admission: "Admission",
                 max_inputs: int = DEFAULT_MAX_BATCH_INPUTS):
        self.catalog, self.registry, self.admission = catalog, registry, admission
        self.max_inputs = max_inputs  # --max-batch-inputs, as on every route that takes a list

    async def rewrite(self, model: str | None, inputs: Sequence[str], options: RewriteOptions, *, per_item: bool = False,
                      truncate: bool = True, keep_alive: float | None = None) -> RewriteResult:
        spec = self.catalog.resolve(model, ModelKind.REWRITER)
        if not inputs:
            raise InvalidInput("'inputs' must not be empty", "inputs")
        check_input_count(len(inputs), self.max_inputs)
        async with self.admission.slot():
            t0 = time.perf_counter()
            async with self.registry.use(spec.name, [ModelKind.REWRITER], keep_alive) as handle:
                load_seconds = time.perf_counter() - t0
                rw = handle.rewriter
                params = rw.params(options)  # a bad option fails the whole request
                if sum(len(x) for x in inputs) <= _INLINE_CHARS:  # a thread hop costs more than this
                    items = _prepare(rw, inputs, truncate)
                else:
                    items = await asyncio.to_thread(_prepare, rw, inputs, truncate)
                if not per_item:
                    for it in items:
                        if it.error is not None:
                            raise it.error
                ok = [i for i, it in enumerate(items) if it.error is None]
                ids = [items[i].tokens[0] for i in ok]
                for i in ok:
                    items[i].tokens = []
                outs = await handle.generate([tuple(x) for x in ids], [params] * len(ok))
                for i, out in zip(ok, outs):
                    if isinstance(out, BaseException):
                        if not per_item:
                            raise out
                        items[i].error = out if isinstance(out, InferdError) else InferenceFailed(str(out))
                        continue
                    items[i].tokens = [list(t) for t in out]
                    items[i].texts = [rw.text(t) for t in out]
        return RewriteResult(spec.name, items, rw.architecture, load_seconds)


def _prepare(rw: "Rewriter", inputs: Sequence[str], truncate: bool) -> list[RewriteItem]:
    """Tokenize every input; bad ones become their item's error (tokens[0] holds the input ids)."""
    items = [RewriteItem() for _ in inputs]
    good = []
    for i, x in enumerate(inputs):
        if not x.strip():
            items[i].error = InvalidInput(f"inputs[{i}] is empty", "inputs")
        else:
            good.append(i)
    for i, enc in zip(good, rw.prepare([inputs[i] for i in good]) if good else []):
        if enc.truncated and not truncate:
            items[i].error = InvalidInput(f"inputs[{i}] is longer than the model's limit of {rw.max_length} tokens "
                                          "and truncate is false", "inputs")
            continue
        items[i].tokens = [list(enc.ids)]
        items[i].prompt_tokens = len(enc.ids)
        items[i].truncated = enc.truncated
    return items
