"""Antfly (/ai/v1) wire models for /read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ReadImage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    url: str


class ReadRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    images: list[ReadImage] = Field(max_length=64)
    prompt: str | None = None
    max_tokens: int = 256
