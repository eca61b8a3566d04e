"""Antfly (/ai/v1) generation requests. `generate` and `chat/completions` take the OpenAI
chat request with Antfly's extension fields (see api/openai/gen_schemas.py); a batch
carries such requests as items, each validated on its own (a bad item fails alone)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.api.openai.gen_schemas import ChatCompletionRequest

MAX_BATCH = 128


class GenerateBody(ChatCompletionRequest):
    """The OpenAI chat request plus the spec's engine controls (API-NOTES.md). Every value
    inferd cannot honour is refused here (a Literal names the accepted values) or by the
    service against the loaded model (cache_dtype, draft_model), never ignored."""

    draft_model: str | None = Field(None, min_length=1, max_length=256)
    speculative_k: int | None = Field(None, ge=1, le=16)
    speculation_policy: Literal["auto", "on", "off"] = "auto"
    speculation_calibration: Literal["none", "online"] = "none"
    cache_dtype: Literal["f16", "bf16", "q8_0", "q4_0", "f32"] | None = None
    cache_compaction_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    prompt_cache: bool = True
    prompt_cache_key: str | None = Field(None, max_length=256)
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
