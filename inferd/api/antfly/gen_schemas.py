"""Antfly (/ai/v1) generation requests. `generate` and `chat/completions` take the OpenAI
chat request with Antfly's extension fields (see api/openai/gen_schemas.py); a batch
carries such requests as items, each validated on its own (a bad item fails alone)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.api.openai.gen_schemas import ChatCompletionRequest

MAX_BATCH = 128


class GenerateBody(ChatCompletionRequest):
    """The OpenAI chat request (which carries the spec's engine controls: API-NOTES.md) plus
    the runtime selection fields. A value inferd cannot honour is refused, never ignored."""

    # runtime selection: inferd has one runtime per model format and no compiled backends
    backend: Literal["auto", "llama.cpp", "llama_cpp"] = "auto"
    mode: Literal["auto", "eager"] = "auto"
    compiled_target: Literal["none"] | None = None


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    custom_id: str | None = None
    body: dict[str, Any]


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    mode: Literal["sync"] = "sync"
    requests: list[BatchItem] = Field(..., min_length=1, max_length=MAX_BATCH)
