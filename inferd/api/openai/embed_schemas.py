"""OpenAI-face wire models for embeddings and rerank (llama-server / vLLM / Infinity shape)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# A string, a list of strings, token ids, or a list of token-id lists (as OpenAI accepts).
EmbeddingInput = str | list[str] | list[int] | list[list[int]]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    input: EmbeddingInput
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    # OpenAI answers an over-long input with a 400; `truncate: true` (llama-server, vLLM,
    # Infinity) opts into keeping its first tokens instead.
    truncate: bool = False


class RerankDocument(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    query: str
    documents: list[str | RerankDocument] = Field(max_length=10_000)
    top_n: int | None = Field(None, ge=0)
    return_documents: bool = False
