"""Ollama wire models for /api/embed and the legacy /api/embeddings."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class EmbedRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = None
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None


class LegacyEmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    prompt: str = ""
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None
