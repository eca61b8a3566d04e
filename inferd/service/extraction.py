"""ExtractionService: /ai/v1/extract's verb. Entities and relations (GLiNER span models,
token classifiers, spaCy pipelines), classifications (fixed-label and zero-shot NLI
classifiers) and structures (a generator filling a JSON Schema under its grammar).

Its dependencies are explicit: the catalog (served names), the registry (load on demand),
admission (one slot per request) and the generation verb (structures run through the
generators' continuous-batching engines like any other generation).

The work of a request runs stage by stage (entities, relations, classifications,
structures); in each stage the pieces of all its inputs are prepared in one thread hop and
handed to the model's batcher in one submission, so they share forward passes with each
other and with concurrent requests."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from inferd.chat.grammar import request_grammar
from inferd.errors import (CapabilityMissing, ContextOverflow, InferdError, InferenceFailed, InvalidInput, ModelNotSupported,
                           PayloadTooLarge)
from inferd.extraction_types import (Classification, ClassificationSpec, Entity, ExtractItem, ExtractOptions,
                                     ExtractSchema, Relation, RelationSpec)
from inferd.kinds import CLASSIFIER, EXTRACTOR
from inferd.models import ModelKind, ModelSpec
from inferd.registry.registry import Registry
from inferd.scheduling.admission import Admission
from inferd.service.input_limits import DEFAULT_MAX_BATCH_INPUTS, check_input_count
from inferd.service.core import Catalog
from inferd.service.handles import EncoderHandle, EncoderRuntime
from inferd.service.verb import Verb, off_loop, raise_first
from inferd.types import ChatOptions, GenerateRequest, Generation, SamplingParams

log = logging.getLogger("inferd.extraction")

KINDS = [ModelKind.EXTRACTOR, ModelKind.CLASSIFIER, ModelKind.GENERATOR]
MAX_CHARS = 100_000          # one input's text
MAX_TOTAL_CHARS = 1_000_000  # all inputs of a request
MAX_STRUCTURE_TOKENS = 4096
MAX_STRUCTURE_JOBS = 256   # inputs x structures of one request (each is a generation)
# Classifier passes of one request: inputs x classifications, and x labels for a zero-shot
# (NLI) model, which scores each (text, label) pair in its own pass.
MAX_CLASSIFY_PASSES = 4096
# Encoder passes (word windows x label groups) of one stage of one request: a small model's
# narrow window and many relation labels would otherwise make a 1 MB request hours of work.
MAX_ENCODER_PASSES = 16384
Generate = Callable[..., Awaitable[Generation]]
Read = Callable[..., Awaitable[Any]]  # ReadingService.read(model, refs) -> ReadResult


class Piece(Protocol):
    cost: int     # padded tokens, for the batcher
    tokens: int   # counted in usage


class EntityRuntime(EncoderRuntime, Protocol):
    """An extractor (runtimes/extract, runtimes/spacy): pieces in, one batched pass, decoded here."""

    def match_labels(self, labels: Sequence[str]) -> list[str]: ...
    def prepare_entities(self, text: str, labels: list[str], options: ExtractOptions) -> list[Any]: ...
    def entities(self, text: str, labels: list[str], options: ExtractOptions, pieces: Sequence[Any],
                 outs: Sequence[Any]) -> list[Entity]: ...
    def prepare_relations(self, text: str, entities: list[Entity], relations: Sequence[RelationSpec],
                          options: ExtractOptions) -> list[Any]: ...
    def relations(self, text: str, entities: list[Entity], relations: Sequence[RelationSpec],
                  options: ExtractOptions, pieces: Sequence[Any], outs: Sequence[Any]) -> list[Relation]: ...


class ClassifierRuntime(EncoderRuntime, Protocol):
    def match_classes(self, c: ClassificationSpec) -> list[str]: ...
    def prepare_classify(self, text: str, labels: list[str]) -> list[Any]: ...
    def scores(self, labels: list[str], multi_label: bool, outs: Sequence[Any]) -> list[float]: ...


@dataclass
class ExtractResult:
    model: str
    items: list[ExtractItem | InferdError] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0


def part_capabilities(spec: ModelSpec) -> set[str]:
    """The schema parts `spec` can serve by itself or through its manifest's generator."""
    caps = set(spec.capabilities)
    if spec.kind is ModelKind.GENERATOR or spec.manifest.get("generator"):
        caps.add("structures")
    return caps


class ExtractionService:
    def __init__(self, catalog: Catalog, registry: Registry, admission: Admission, generate: Generate,
                 max_inputs: int = DEFAULT_MAX_BATCH_INPUTS, read: Read | None = None):
        self.catalog, self.registry, self.admission, self._generate = catalog, registry, admission, generate
        self.max_inputs = max_inputs  # --max-batch-inputs
        self._read = read  # the readers' verb: image parts become text first (under media admission)
        # the encoder stages' kinds; each stage says which runtime Protocol it needs of the handle
        self.encoders: dict[ModelKind, Verb[EncoderHandle[Any]]] = {
            k.kind: Verb(k, registry, admission) for k in (EXTRACTOR, CLASSIFIER)}

    # ---- model choice ------------------------------------------------------------------------
    def resolve(self, model: str | None, schema: ExtractSchema) -> ModelSpec:
        """The served model of a request. Omitted: the only model of the kind the schema
        needs (an extractor for entities and relations, else a classifier, else a generator)."""
        if model:
            return self.catalog.resolve(model, *KINDS)
        parts = set(schema.parts())
        kind = (ModelKind.EXTRACTOR if parts & {"entities", "relations"} else
                ModelKind.CLASSIFIER if "classifications" in parts else ModelKind.GENERATOR)
        return self.catalog.resolve(None, kind)

    def _check_parts(self, spec: ModelSpec, schema: ExtractSchema) -> str | None:
        """Every asked-for part must be servable: else a 400 naming it. -> the structures generator."""
        parts = schema.parts()
        if not parts:
            raise InvalidInput("schema asks for nothing: give entities, relations, classifications or structures",
                               "schema")
        caps = part_capabilities(spec)
        for p in parts:
            if p not in caps:
                can = ", ".join(sorted(caps & {"entities", "relations", "classifications", "structures"})) or "none"
                hint = "; name a generator in its model_manifest.json 'generator'" if p == "structures" else ""
                raise CapabilityMissing(f"model '{spec.name}' ({spec.kind.value}) cannot extract {p} "
                                        f"(it can do: {can}{hint})")
        if schema.relations and not schema.entities:
            raise InvalidInput("relations need schema.entities (the labels of the entities they connect)",
                               "schema.entities")
        if not schema.structures:
            return None
        if spec.kind is ModelKind.GENERATOR:
            return spec.name
        gen = str(spec.manifest["generator"])
        try:
            return self.catalog.resolve(gen, ModelKind.GENERATOR).name
        except InferdError as e:
            raise ModelNotSupported(f"model '{spec.name}': its structures generator '{gen}' is not served "
                                    f"({e.message})") from e

    # ---- the verb ------------------------------------------------------------------------------
    async def extract(self, model: str | None, inputs: Sequence[str | Sequence[Any] | InferdError],
                      schema: ExtractSchema, options: ExtractOptions, per_item: bool = False) -> ExtractResult:
        """`inputs`: a text, an error, or parts in order (texts and media references: the
        images are read by an OCR reader and their text takes their place)."""
        check_input_count(len(inputs), self.max_inputs, "inputs")
        spec = self.resolve(model, schema)
        generator = self._check_parts(spec, schema)
        if len(schema.structures) * len(inputs) > MAX_STRUCTURE_JOBS:
            raise InvalidInput(f"{len(inputs)} inputs x {len(schema.structures)} structures is more than "
                               f"{MAX_STRUCTURE_JOBS} generations in one request", "schema.structures")
        raise_first(inputs, per_item)
        if any(isinstance(x, (list, tuple)) for x in inputs):
            inputs = await self._read_images(spec, inputs, per_item)
        texts: list[str | InferdError] = [x for x in inputs if isinstance(x, (str, InferdError))]
        items: list[Any] = [self._check_input(i, x) for i, x in enumerate(texts)]
        if sum(len(x) for x in items if isinstance(x, str)) > MAX_TOTAL_CHARS:
            raise PayloadTooLarge(f"the inputs hold more than {MAX_TOTAL_CHARS} characters in all")
        raise_first(items, per_item)
        result = ExtractResult(spec.name)
        out: list[Any] = [x if isinstance(x, InferdError) else ExtractItem() for x in items]
        ok = [i for i, x in enumerate(items) if isinstance(x, str)]
        async with self.admission.slot():  # the structures' generations run under it (admit=False)
            if spec.kind is not ModelKind.GENERATOR and set(schema.parts()) - {"structures"}:
                async with self.encoders[spec.kind].hold(spec.name) as held:
                    handle = held.handle
                    # A manifest may claim what the runtime cannot do: the runtime has the last word.
                    can: frozenset[str] = getattr(handle.runtime, "capabilities", frozenset())
                    for p in set(schema.parts()) - {"structures"} - set(can):
                        raise CapabilityMissing(f"model '{spec.name}' cannot extract {p} (its runtime does "
                                                f"{', '.join(sorted(can)) or 'nothing'})")
                    if schema.entities:
                        await self._entities(handle, items, ok, out, schema, options, result)
                    if schema.relations:
                        await self._relations(handle, items, ok, out, schema, options, result)
                    if schema.classifications:
                        await self._classify(handle, items, ok, out, schema, options, result)
            if generator is not None:
                await self._structures(generator, items, ok, out, schema, result)
        raise_first(out, per_item)
        result.items = out
        return result

    async def _read_images(self, spec: ModelSpec, inputs: Sequence[Any], per_item: bool) -> list[Any]:
        """Each input with image parts -> its text: text parts and each image's OCR text in
        order. The reader: the extractor manifest's `reader`, else the only one served."""
        readers = self.catalog.models(ModelKind.READER)
        reader = spec.manifest.get("reader") or (readers[0].name if len(readers) == 1 else None)
        missing: InferdError | None = None
        if self._read is None or not readers:
            missing = CapabilityMissing("an input has an image part; extracting from images needs an OCR reader "
                                        "('readers' capability), and none is served")
        elif reader is None:
            missing = InvalidInput(f"an input has an image part and {len(readers)} readers are served: name one "
                                   f"in model '{spec.name}''s model_manifest.json 'reader'", "inputs")
        out: list[Any] = []
        for x in inputs:
            if not isinstance(x, (list, tuple)):
                out.append(x)
                continue
            refs = [p for p in x if not isinstance(p, str)]
            try:
                if missing is not None:
                    raise missing
                assert self._read is not None
                r = await self._read(str(reader), refs)
            except InferdError as e:
                if not per_item:
                    raise
                out.append(e)
                continue
            texts = iter(o.text for o in r.outputs)
            out.append("\n".join(p if isinstance(p, str) else next(texts) for p in x))
        return out

    @staticmethod
    def _check_input(i: int, x: str | InferdError) -> str | InferdError:
        if isinstance(x, InferdError):
            return x
        if not x.strip():
            return InvalidInput(f"inputs[{i}].content is empty", f"inputs[{i}].content")
        if len(x) > MAX_CHARS:
            return PayloadTooLarge(f"inputs[{i}].content has {len(x)} characters; the limit is {MAX_CHARS}")
        return x

    @staticmethod
    def _live(ok: list[int], out: list[Any]) -> list[int]:
        return [i for i in ok if not isinstance(out[i], InferdError)]

    @staticmethod
    def _fail(out: list[Any], i: int, err: BaseException) -> None:
        out[i] = err if isinstance(err, InferdError) else InferenceFailed(f"inference failed: {err}")

    async def _encode_decode(self, handle: EncoderHandle[Any], items: list[str], live: list[int], out: list[Any],
                             result: Any, prepare: Callable[[int], list[Any]],
                             decode: Callable[[int, list[Any], list[Any]], Any]) -> list[tuple[int, Any]]:
        """One span stage (entities, relations) for the live items: prepare each item's pieces
        and, later, decode the model's output (the span search) on worker threads, as long
        texts make both slow; one batcher submission between. -> (item, decoded) for the items
        that succeeded; a failed item's error goes to `out`."""
        cost = sum(len(items[i]) for i in live)
        groups = await off_loop(lambda: [prepare(i) for i in live], cost)
        results = await self._run(handle, groups)
        found = await _decode([None if isinstance(res, BaseException) else functools.partial(decode, i, g, res)
                               for i, g, res in zip(live, groups, results)], cost)
        done = []
        for i, g, res, value in zip(live, groups, results, found):
            if isinstance(res, BaseException) or isinstance(value, InferdError):
                self._fail(out, i, res if isinstance(res, BaseException) else value)
                continue
            result.prompt_tokens += sum(p.tokens for p in g)
            done.append((i, value))
        return done

    async def _run(self, handle: EncoderHandle[Any], groups: list[list[Any]]) -> list[list[Any] | BaseException]:
        """Run every group's pieces through the model's batcher in ONE submission; a group
        whose piece failed gets that piece's exception."""
        flat = [p for g in groups for p in g]
        if len(flat) > MAX_ENCODER_PASSES:
            raise PayloadTooLarge(f"the inputs need {len(flat)} encoder passes (text windows x label groups); the "
                                  f"limit of one request is {MAX_ENCODER_PASSES}: send shorter or fewer texts, "
                                  "or fewer labels")
        res = await handle.scheduler.submit_each(flat, [p.cost for p in flat])
        out: list[list[Any] | BaseException] = []
        k = 0
        for g in groups:
            part = res[k:k + len(g)]
            k += len(g)
            err = next((r for r in part if isinstance(r, BaseException)), None)
            out.append(err if err is not None else part)
        return out

    async def _entities(self, handle: EncoderHandle[EntityRuntime], items, ok, out, schema, options,
                        result) -> None:
        rt = handle.runtime
        labels = rt.match_labels(schema.entities)  # a label a fixed-label model lacks: 400, named
        for i, ents in await self._encode_decode(
                handle, items, self._live(ok, out), out, result,
                lambda i: rt.prepare_entities(items[i], labels, options),
                lambda i, g, res: rt.entities(items[i], labels, options, g, res)):
            out[i].entities = ents

    async def _relations(self, handle: EncoderHandle[EntityRuntime], items, ok, out, schema, options,
                         result) -> None:
        rt = handle.runtime
        for i, rels in await self._encode_decode(
                handle, items, self._live(ok, out), out, result,
                lambda i: rt.prepare_relations(items[i], out[i].entities, schema.relations, options),
                lambda i, g, res: rt.relations(items[i], out[i].entities, schema.relations, options, g, res)):
            out[i].relations = rels

    async def _classify(self, handle: EncoderHandle[ClassifierRuntime], items, ok, out, schema, options,
                        result) -> None:
        rt = handle.runtime
        specs = [(c, rt.match_classes(c)) for c in schema.classifications]  # bad labels: 400
        live = self._live(ok, out)
        passes = len(live) * sum(len(labels) if getattr(rt, "zero_shot", False) else 1 for _, labels in specs)
        if passes > MAX_CLASSIFY_PASSES:
            raise InvalidInput(f"{len(live)} inputs x the classifications' labels need {passes} classifier passes; "
                               f"the limit of one request is {MAX_CLASSIFY_PASSES} (send fewer inputs or labels)",
                               "schema.classifications")
        groups = await off_loop(lambda: [rt.prepare_classify(items[i], labels) for i in live for _, labels in specs],
                                sum(len(items[i]) for i in live) * len(specs))
        res_all = await self._run(handle, groups)
        n = len(specs)
        for j, i in enumerate(live):
            found: list[Classification] = []
            for k, (c, labels) in enumerate(specs):
                res, g = res_all[j * n + k], groups[j * n + k]
                if isinstance(res, BaseException):
                    self._fail(out, i, res)
                    break
                result.prompt_tokens += sum(p.tokens for p in g)
                found.extend(_pick(c, labels, rt.scores(labels, c.multi_label, res), options.threshold))
            else:
                out[i].classifications = found

    async def _structures(self, generator: str, items, ok, out, schema, result) -> None:
        # Each structure's grammar is compiled once, before any generation: a schema the grammar
        # cannot enforce is the request's 400, and the inputs share the compiled grammar.
        grammars: dict[str, str] = {}
        for name, js in schema.structures.items():
            rf = {"type": "json_schema", "json_schema": {"name": name, "schema": js, "strict": True}}
            try:
                grammars[name] = str(request_grammar(response_format=rf))
            except InvalidInput as e:
                raise InvalidInput(f"schema.structures.{name}: {e.message}", f"schema.structures.{name}") from e

        async def one(i: int, name: str, js: dict[str, Any]) -> tuple[int, str, Any]:
            prompt = _structure_prompt(items[i], name, js)
            req = GenerateRequest(
                model=generator, messages=[{"role": "user", "content": prompt}], template_fallback=True,
                max_tokens=min(MAX_STRUCTURE_TOKENS, json_budget(js)), clamp_to_context=True,
                sampling=SamplingParams(temperature=0.0), chat=ChatOptions(grammar=grammars[name]))
            try:
                g = await self._generate(req, admit=False)
            except InferdError as e:
                return i, name, e
            result.prompt_tokens += g.usage.prompt_tokens
            result.completion_tokens += g.usage.completion_tokens
            bound = json_budget(js)
            if g.finish_reason == "length" and g.usage.completion_tokens < bound:
                # The budget was cut below what the schema can need (by the model's context
                # after the prompt, or the structure cap): the request's schema is too big.
                return i, name, ContextOverflow(
                    f"structure '{name}' can need up to {bound} tokens of JSON, but only "
                    f"{g.usage.completion_tokens} fit after the prompt in model '{generator}' (at most "
                    f"{MAX_STRUCTURE_TOKENS}): use fewer or shorter fields, or a shorter input")
            try:
                if g.finish_reason == "length":
                    raise ValueError("the output did not finish within its token budget")
                return i, name, json.loads(g.text)
            except ValueError as e:
                return i, name, InferenceFailed(f"structure '{name}': the generator's output is not complete "
                                                f"JSON ({e})")

        live = self._live(ok, out)
        jobs = [one(i, name, js) for i in live for name, js in schema.structures.items()]
        for i, name, value in await asyncio.gather(*jobs):
            if isinstance(out[i], InferdError):
                continue
            if isinstance(value, InferdError):
                out[i] = value
            else:
                out[i].structures[name] = value


async def _decode(calls: list[Callable[[], Any] | None], chars: int) -> list[Any]:
    """Each input's decode call (None: skipped), on a worker thread unless the inputs are
    small; an input whose decode raises a domain error gets that error as its result."""
    def run() -> list[Any]:
        out: list[Any] = []
        for call in calls:
            try:
                out.append(None if call is None else call())
            except InferdError as e:
                out.append(e)
        return out

    return await off_loop(run, chars)


def _pick(c: ClassificationSpec, labels: list[str], scores: list[float], threshold: float) -> list[Classification]:
    """Single-label: the best label. Multi-label: every label scoring at least `threshold`,
    best first."""
    ranked = sorted(zip(labels, scores), key=lambda t: -t[1])
    if not c.multi_label:
        return [Classification(c.name, ranked[0][0], float(ranked[0][1]))]
    return [Classification(c.name, lab, float(s)) for lab, s in ranked if s >= threshold]


def _structure_prompt(text: str, name: str, schema: dict[str, Any]) -> str:
    fields = "\n".join(f"- {k}: {v.get('description') or v.get('type') or 'value'}"
                       for k, v in schema.get("properties", {}).items())
    return (f"Extract '{name}' from the text below as JSON with these fields:\n{fields}\n\n"
            f"Text:\n{text}\n\nJSON:")


def json_budget(s: Any, depth: int = 0) -> int:
    """An upper bound on the tokens of a JSON value the grammar allows for schema `s` (a token
    is at least one byte, an escaped character at most 6): structures get this as max_tokens,
    so a bounded schema always finishes. Unbounded parts count as 512."""
    if not isinstance(s, dict) or depth > 8:
        return 512
    t = s.get("type")
    if "enum" in s:
        return max((len(json.dumps(v)) for v in s["enum"]), default=8) + 2
    if t == "string":
        if s.get("format"):
            return 40
        return 6 * int(s["maxLength"]) + 2 if "maxLength" in s else 512
    if t in ("integer", "number"):
        return 40
    if t in ("boolean", "null"):
        return 6
    if t == "object":
        props = s.get("properties") or {}
        return 2 + sum(len(json.dumps(k)) + 4 + json_budget(v, depth + 1) for k, v in props.items())
    if t == "array":
        n = int(s.get("maxItems", 16))
        return 2 + n * (2 + json_budget(s.get("items"), depth + 1))
    return 512
