"""Antfly (/ai/v1) wire models for embed, embeddings, rerank and rerank_multimodal."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ContentPart(BaseModel):
    """{type: text, text} | {type: image_url, image_url: {url}} | {type: media, data, mime_type}."""
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "image_url", "media"]
    text: str | None = None
    image_url: dict[str, Any] | None = None
    data: str | None = None
    mime_type: str | None = None


class EmbedRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    input: str | list[str | ContentPart | list[ContentPart]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    task_type: str | None = None
    input_type: str | None = None  # deprecated alias of task_type
    error_policy: Literal["fail_fast", "per_item"] = "fail_fast"


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    query: str
    prompts: list[str] = Field(max_length=10_000)


class MultimodalDocument(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str | None = None
    content: str | list[ContentPart] | None = None


class MultimodalRerankRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    query: str
    documents: list[MultimodalDocument] = Field(max_length=10_000)
