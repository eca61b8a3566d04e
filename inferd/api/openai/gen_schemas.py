"""OpenAI wire requests for /v1/chat/completions and /v1/completions, with the extension
fields llama-server, openai-server, GenAIServer and Antfly accept (top_k, min_p,
repetition_penalty, grammar, chat_template, chat_template_kwargs, enable_thinking,
ignore_eos, and the engine controls). Unknown fields are ignored, as OpenAI clients send many
(user, store, ...)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, tool_call_id, ... reach the template
    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields shared by chat and completions."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    max_tokens: int | None = Field(None, ge=0)
    max_completion_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0)
    repeat_penalty: float | None = Field(None, gt=0.0)  # llama-server's name
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    n: int = Field(1, ge=1, le=8)  # as vLLM and llama-server; at most the model's parallel slots
    ignore_eos: bool = False
    grammar: str | None = None
    # The engine controls of the Antfly spec (API-NOTES.md), accepted on every generation face
    # as llama-server and vLLM accept their own extensions (`extra_body` in the openai client).
    # A value inferd cannot honour is refused here (a Literal names the accepted values) or by
    # the service against the loaded model (cache_dtype, draft_model), never ignored.
    draft_model: str | None = Field(None, min_length=1, max_length=256)
    speculative_k: int | None = Field(None, ge=1, le=16)
    speculation_policy: Literal["auto", "on", "off"] = "auto"
    speculation_calibration: Literal["none", "online"] = "none"
    cache_dtype: Literal["f16", "bf16", "q8_0", "q4_0", "f32"] | None = None
    cache_compaction_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    prompt_cache: bool = True
    cache_prompt: bool | None = None  # llama-server's name for prompt_cache
    prompt_cache_key: str | None = Field(None, max_length=256)  # OpenAI's own field: slot affinity here

    @model_validator(mode="after")
    def _cache_prompt_alias(self) -> "SamplingFields":
        if self.cache_prompt is not None:
            if "prompt_cache" in self.model_fields_set and self.prompt_cache != self.cache_prompt:
                raise ValueError("prompt_cache and cache_prompt (its llama-server name) disagree")
            self.prompt_cache = self.cache_prompt
        return self


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    enable_thinking: bool | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]] = ""
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(None, ge=0, le=20)  # legacy: how many top tokens per position
    best_of: int | None = Field(None, ge=1)
