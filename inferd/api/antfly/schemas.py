"""Antfly (/ai/v1) wire request models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.text.semantic import MAX_WINDOW


class TextPart(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ChunkTextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target_tokens: int = Field(500, ge=1, le=100_000)
    overlap_tokens: int = Field(50, ge=0)
    separator: str = "\n\n"


class ChunkSemanticConfig(BaseModel):
    """The built-in `semantic` chunker's options (text/semantic.py)."""
    model_config = ConfigDict(extra="forbid")
    embedder: str | None = None  # a served dense embedder; default: the one /ai/v1/models names
    threshold: float | None = Field(None, ge=-1.0, le=1.0)  # cosine similarity below which to cut
    percentile: float | None = Field(None, gt=0.0, lt=100.0)  # or: cut the lowest this % of gaps
    window: int = Field(1, ge=1, le=MAX_WINDOW)  # sentences on each side of a gap
    min_tokens: int = Field(0, ge=0, le=100_000)
    max_tokens: int | None = Field(None, ge=1, le=100_000)  # default: config.text.target_tokens


class ChunkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = "fixed"
    max_chunks: int = Field(50, ge=1, le=10_000)
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    text: ChunkTextConfig = Field(default_factory=lambda: ChunkTextConfig.model_validate({}))
    semantic: ChunkSemanticConfig = Field(default_factory=lambda: ChunkSemanticConfig.model_validate({}))


class ChunkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: str | TextPart | None = None
    text: str | None = None  # deprecated alias of input
    model: str | None = None  # accepted at top level too; config.model wins
    config: ChunkConfig = Field(default_factory=lambda: ChunkConfig.model_validate({}))
