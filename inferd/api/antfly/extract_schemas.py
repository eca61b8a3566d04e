"""Antfly (/ai/v1/extract) wire models. Limits here bound the work one request can ask for."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.api.antfly.embed_schemas import ContentPart

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
