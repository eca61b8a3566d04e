"""Rewriting with seq2seq models (question generation, query generation, paraphrase,
translation): the `rewrite` verb. The rewriter's handle is service/handles.py's
RewriterHandle; its loader is the rewriter kind's (inferd/kinds/rewriter.py).

rewrite(): resolve the served name (unknown -> 404, wrong kind -> 400), validate the options
against the model's generation_config.json, take an admission slot, tokenize (an input over
the model's limit is cut and flagged, or refused with truncate=False), then hand every input
to the model's scheduler, which encodes and decodes it together with whatever else is running
(service/verb.py's pipeline). With per_item, a bad input becomes that item's error instead of
failing the request."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferd.service.input_limits import DEFAULT_MAX_BATCH_INPUTS, check_input_count
from inferd.errors import InferdError, InferenceFailed, InvalidInput
from inferd.kinds import REWRITER
from inferd.models import ModelKind
from inferd.service.verb import Verb, total_chars

if TYPE_CHECKING:  # the runtime modules import tokenizers/onnxruntime: only when a rewriter loads
    from inferd.registry.registry import Registry
    from inferd.scheduling.admission import Admission
    from inferd.service.core import Catalog
    from inferd.runtimes.seq2seq.model import Rewriter
    from inferd.service.handles import RewriterHandle

log = logging.getLogger("inferd.service.rewriting")

MAX_NEW_TOKENS = 1024     # max_tokens ceiling (the decoder's own max_length is the default)


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
        # a failed generation of one input is that input's error (with per_item)
        self.verb = Verb(REWRITER, registry, admission, failed=lambda e: InferenceFailed(str(e)))

    async def rewrite(self, model: str | None, inputs: Sequence[str], options: RewriteOptions, *, per_item: bool = False,
                      truncate: bool = True, keep_alive: float | None = None) -> RewriteResult:
        spec = self.catalog.resolve(model, ModelKind.REWRITER)
        if not inputs:
            raise InvalidInput("'inputs' must not be empty", "inputs")
        check_input_count(len(inputs), self.max_inputs)
        async with self.verb.use(spec.name, keep_alive) as held:
            rw = held.handle.runtime
            params = rw.params(options)  # a bad option fails the whole request

            async def submit(h: "RewriterHandle", ready: list[RewriteItem]) -> list[Any]:
                ids = [tuple(it.tokens[0]) for it in ready]
                for it in ready:
                    it.tokens = []
                return await h.generate(ids, [params] * len(ready))

            ran = await self.verb.each(held.handle, lambda: _prepare(rw, inputs, truncate), total_chars(inputs),
                                       per_item, submit, error_of=lambda it: it.error)
            items = ran.prepared
            for i, err in ran.failed:
                items[i].error = err
            for i, out in ran.done:
                items[i].tokens = [list(t) for t in out]
                items[i].texts = [rw.text(t) for t in out]
        return RewriteResult(spec.name, items, rw.architecture, held.load_seconds)


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
