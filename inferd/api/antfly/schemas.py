"""Antfly (/ai/v1) wire request models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TextPart(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ChunkTextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target_tokens: int = Field(500, ge=1, le=100_000)
    overlap_tokens: int = Field(50, ge=0)
    separator: str = "\n\n"


class ChunkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = "fixed"
    max_chunks: int = Field(50, ge=1, le=10_000)
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    text: ChunkTextConfig = Field(default_factory=lambda: ChunkTextConfig.model_validate({}))


class ChunkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: str | TextPart | None = None
    text: str | None = None  # deprecated alias of input
    model: str | None = None  # accepted at top level too; config.model wins
    config: ChunkConfig = Field(default_factory=lambda: ChunkConfig.model_validate({}))
