"""Antfly face: /ai/v1/extract (entities, relations, classifications, structures). Sections:
wire models (their limits bound the work one request can ask for), pure converters, the
thin route."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from inferd.api.antfly.embed import _item_error, _part_ref
from inferd.api.antfly.embed import ContentPart
from inferd.api.antfly.convert import add_item_errors
from inferd.api.deps import get_service
from inferd.api.streaming import cancel_on_disconnect
from inferd.errors import InferdError, InvalidInput
from inferd.extraction_types import ClassificationSpec, ExtractItem, ExtractOptions, ExtractSchema, RelationSpec
from inferd.media.sources import MediaRef
from inferd.service import InferenceService


# ---- wire requests -------------------------------------------------------------------
MAX_INPUTS = 256
MAX_LABELS = 64
# A label is a name ("person", "works at"), as long as a relation type may be: each one is
# tokenized into every prompt and echoed in every entity found.
Label = Annotated[str, Field(max_length=200)]


class ExtractInputWire(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | int | None = None
    content: str | ContentPart | list[ContentPart]
    metadata: dict[str, Any] | None = None


class RelationWire(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(min_length=1, max_length=200)
    source: str | None = Field(None, max_length=200)
    target: str | None = Field(None, max_length=200)


class ClassificationWire(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    labels: list[Label] = Field(default_factory=list, max_length=MAX_LABELS)
    multi_label: bool = False


class StructureWire(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # field -> a type name ("string", "integer", "string[]", ...), a description (a string
    # field), or a JSON Schema object.
    fields: dict[str, str | dict[str, Any]] = Field(min_length=1, max_length=32)
    description: str | None = Field(None, max_length=2000)


class ExtractSchemaWire(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entities: list[Label] = Field(default_factory=list, max_length=MAX_LABELS)
    relations: list[RelationWire] = Field(default_factory=list, max_length=32)
    classifications: list[ClassificationWire] = Field(default_factory=list, max_length=16)
    structures: dict[str, StructureWire] = Field(default_factory=dict, max_length=8)


class ExtractOptionsWire(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    flat_ner: bool = True
    include_confidence: bool = True
    include_spans: bool = True


class ExtractRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    model: str | None = None
    inputs: list[ExtractInputWire] = Field(min_length=1, max_length=MAX_INPUTS)
    schema_: ExtractSchemaWire = Field(alias="schema")
    options: ExtractOptionsWire = Field(default_factory=lambda: ExtractOptionsWire.model_validate({}))
    error_policy: Literal["fail_fast", "per_item"] = "fail_fast"


# ---- wire <-> engine (pure functions) ------------------------------------------------
# A structure field given as a type name. Strings and arrays are bounded so that the
# generated JSON has a bounded length: it always finishes within the token budget.
MAX_STRING = 256
MAX_ITEMS = 16
_SCALARS: dict[str, dict[str, Any]] = {
    "string": {"type": "string", "maxLength": MAX_STRING}, "str": {"type": "string", "maxLength": MAX_STRING},
    "text": {"type": "string", "maxLength": MAX_STRING},
    "integer": {"type": "integer"}, "int": {"type": "integer"},
    "number": {"type": "number"}, "float": {"type": "number"},
    "boolean": {"type": "boolean"}, "bool": {"type": "boolean"},
    "date": {"type": "string", "format": "date"}, "datetime": {"type": "string", "format": "date-time"},
    "date-time": {"type": "string", "format": "date-time"}, "email": {"type": "string", "format": "email"},
}


def field_schema(value: str | dict[str, Any]) -> dict[str, Any]:
    """A field's JSON Schema: a type name ("integer", "string[]", "list[number]"), a JSON
    Schema object as given, or else a description of a (bounded) string field."""
    if isinstance(value, dict):
        return value
    word = value.strip().lower()
    inner = word[:-2] if word.endswith("[]") else word[5:-1] if word.startswith("list[") and word.endswith("]") \
        else word[6:-1] if word.startswith("array[") and word.endswith("]") else None
    if inner is not None and inner in _SCALARS:
        return {"type": "array", "items": dict(_SCALARS[inner]), "maxItems": MAX_ITEMS}
    if word in ("array", "list"):
        return {"type": "array", "items": dict(_SCALARS["string"]), "maxItems": MAX_ITEMS}
    if word in _SCALARS:
        return dict(_SCALARS[word])
    return {"type": "string", "maxLength": MAX_STRING, "description": value}


def structure_schema(s: StructureWire) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": {k: field_schema(v) for k, v in s.fields.items()},
                           "required": list(s.fields), "additionalProperties": False}
    if s.description:
        out["description"] = s.description
    return out


def _text_of(content: str | ContentPart | list[ContentPart], where: str) -> str | list[str | MediaRef]:
    """An input's text, or (when it has image parts) its parts in order: texts and image
    references, which the service has read by an OCR reader before extracting."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    if all(p.type == "text" for p in parts):
        return "\n".join(p.text or "" for p in parts)
    return [p.text or "" if p.type == "text" else _part_ref(p, f"{where}.content[{j}]") for j, p in enumerate(parts)]


def inputs_of(req: ExtractRequest) -> list[str | list[str | MediaRef] | InferdError]:
    out: list[str | list[str | MediaRef] | InferdError] = []
    for i, x in enumerate(req.inputs):
        try:
            out.append(_text_of(x.content, f"inputs[{i}]"))
        except InferdError as e:
            out.append(e)
    return out


def schema_of(req: ExtractRequest) -> ExtractSchema:
    s = req.schema_
    for i, label in enumerate(s.entities):
        if not label.strip():
            raise InvalidInput(f"schema.entities[{i}] is empty", f"schema.entities[{i}]")
    for i, c in enumerate(s.classifications):
        if any(not lab.strip() for lab in c.labels):
            raise InvalidInput(f"schema.classifications[{i}].labels has an empty label",
                               f"schema.classifications[{i}].labels")
    names = [c.name for c in s.classifications]
    if len(set(names)) != len(names):
        raise InvalidInput("schema.classifications names must be unique", "schema.classifications")
    return ExtractSchema(
        entities=list(dict.fromkeys(x.strip() for x in s.entities)),
        relations=[RelationSpec(r.type.strip(), r.source, r.target) for r in s.relations],
        classifications=[ClassificationSpec(c.name, tuple(dict.fromkeys(x.strip() for x in c.labels)), c.multi_label)
                         for c in s.classifications],
        structures={name: structure_schema(st) for name, st in s.structures.items()})


def options_of(req: ExtractRequest) -> ExtractOptions:
    o = req.options
    return ExtractOptions(o.threshold, o.flat_ner, o.include_confidence, o.include_spans)


def _entity(e: Any, opts: ExtractOptions) -> dict[str, Any]:
    out: dict[str, Any] = {"label": e.label, "text": e.text}
    if opts.include_spans:
        out.update(start=e.start, end=e.end)
    if opts.include_confidence:
        out["score"] = e.score
    return out


def _scored(d: dict[str, Any], score: float, opts: ExtractOptions) -> dict[str, Any]:
    if opts.include_confidence:
        d["score"] = score
    return d


def item(index: int, id_: Any, x: ExtractItem, opts: ExtractOptions,
         metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {"id": str(index) if id_ is None else str(id_), "index": index,
            "entities": [_entity(e, opts) for e in x.entities],
            "relations": [_scored({"type": r.type, "source": {"entity_index": r.source},
                                   "target": {"entity_index": r.target}}, r.score, opts) for r in x.relations],
            "classifications": [_scored({"name": c.name, "label": c.label}, c.score, opts)
                                for c in x.classifications],
            "structures": x.structures}
    if metadata is not None:  # the caller's own fields for this input, returned as given
        out["metadata"] = metadata
    return out


def extract_response(req: ExtractRequest, r: Any, per_item: bool) -> dict[str, Any]:
    """`r`: the service's ExtractResult (items: ExtractItem or the item's InferdError)."""
    opts = options_of(req)
    data, errors = [], []
    for i, x in enumerate(r.items):
        if isinstance(x, InferdError):
            errors.append(_item_error(i, x))
        else:
            data.append(item(i, req.inputs[i].id, x, opts, req.inputs[i].metadata))
    out: dict[str, Any] = {"object": "extraction", "model": r.model, "data": data,
                           "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                                     "total_tokens": r.prompt_tokens + r.completion_tokens}}
    return add_item_errors(out, errors, len(r.items)) if per_item else out


# ---- routes --------------------------------------------------------------------------
router = APIRouter(prefix="/ai/v1")


@router.post("/extract")
async def extract(req: ExtractRequest, request: Request, svc: InferenceService = Depends(get_service)) -> JSONResponse:
    per_item = req.error_policy == "per_item"
    r = await cancel_on_disconnect(request, svc.extract(
        req.model, inputs_of(req), schema_of(req), options_of(req), per_item=per_item))
    return JSONResponse(extract_response(req, r, per_item))
