"""Ollama wire requests for /api/chat and /api/generate. Unknown fields and options are
ignored, as Ollama does (it logs them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class OllamaMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # tool_calls, tool_name, ... reach the template
    role: str
    content: str | None = ""
    images: list[str] | None = None
    thinking: str | None = None  # output-only: never replayed into the prompt


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[OllamaMessage] = []
    stream: bool = True
    format: str | dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None  # GenAIServer's extension
    think: bool | str | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    stream: bool = True
    raw: bool = False
    format: str | dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None
    images: list[str] | None = None
    think: bool | str | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
