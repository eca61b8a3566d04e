"""Antfly (/ai/v1) wire model for /rewrite."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RewriteRequest(BaseModel):
    # Unknown fields are refused: a misspelt option (num_beam) must not silently decode greedily.
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    inputs: list[str]
    max_tokens: int | None = Field(None, ge=1)
    num_beams: int | None = Field(None, ge=1)
    num_return_sequences: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    error_policy: Literal["fail_fast", "per_item"] = "fail_fast"
    truncate: bool = True
