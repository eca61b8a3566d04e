"""Engine types of extraction (/ai/v1/extract), shared by the service, the runtimes and the
Antfly face. Plain dataclasses: no HTTP, no native library."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RelationSpec:
    """A relation type to find; `source`/`target` optionally restrict the entity labels of its ends."""

    type: str
    source: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class ClassificationSpec:
    name: str
    labels: tuple[str, ...] = ()
    multi_label: bool = False


@dataclass
class ExtractSchema:
    entities: list[str] = field(default_factory=list)
    relations: list[RelationSpec] = field(default_factory=list)
    classifications: list[ClassificationSpec] = field(default_factory=list)
    # name -> a JSON Schema object (already built from the wire's {fields: {...}})
    structures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def parts(self) -> list[str]:
        return [p for p in ("entities", "relations", "classifications", "structures") if getattr(self, p)]


@dataclass(frozen=True)
class ExtractOptions:
    threshold: float = 0.5
    flat_ner: bool = True
    include_confidence: bool = True
    include_spans: bool = True


@dataclass
class Entity:
    label: str
    text: str
    start: int          # character offsets into the input's text, end exclusive
    end: int
    score: float


@dataclass
class Relation:
    type: str
    source: int         # index into the same item's entities
    target: int
    score: float


@dataclass
class Classification:
    name: str
    label: str
    score: float


@dataclass
class ExtractItem:
    """What one input produced."""

    entities: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    classifications: list[Classification] = field(default_factory=list)
    structures: dict[str, Any] = field(default_factory=dict)
