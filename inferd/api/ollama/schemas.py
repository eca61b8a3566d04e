"""Ollama wire request models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ShowRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    name: str | None = None  # older clients send `name`
    verbose: bool = False
