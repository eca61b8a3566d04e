"""Antfly (/ai/v1) generation requests. `generate` and `chat/completions` take the OpenAI
chat request with Antfly's extension fields (see api/openai/gen_schemas.py); a batch
carries such requests as items, each validated on its own (a bad item fails alone)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.api.openai.gen_schemas import ChatCompletionRequest

MAX_BATCH = 128

GenerateBody = ChatCompletionRequest


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    custom_id: str | None = None
    body: dict[str, Any]


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    mode: Literal["sync"] = "sync"
    requests: list[BatchItem] = Field(..., min_length=1, max_length=MAX_BATCH)
