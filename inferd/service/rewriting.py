"""Rewriting with seq2seq models (question generation, query generation, paraphrase,
translation): the `rewrite` verb. The rewriter's handle is service/handles.py's
RewriterHandle; its loader is the rewriter kind's (inferd/kinds/rewriter.py).

rewrite(): resolve the served name (unknown -> 404, wrong kind -> 400), validate the options
against the model's generation_config.json, take an admission slot, tokenize (an input over
the model's limit is cut and flagged, or refused with truncate=False), then hand every input
to the model's scheduler, which encodes and decodes it together with whatever else is running.
With per_item, a bad input becomes that item's error instead of failing the request."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inferd.service.input_limits import DEFAULT_MAX_BATCH_INPUTS, check_input_count
from inferd.errors import InferdError, InferenceFailed, InvalidInput
from inferd.models import ModelKind

if TYPE_CHECKING:  # the runtime modules import tokenizers/onnxruntime: only when a rewriter loads
    from inferd.registry.registry import Registry
    from inferd.scheduling.admission import Admission
    from inferd.service.core import Catalog
    from inferd.runtimes.seq2seq.model import Rewriter

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
