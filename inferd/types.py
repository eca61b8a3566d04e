"""Engine dataclasses shared by the service, the scheduler and the runtimes.

Faces convert their wire formats to these (api/*/convert.py) and back; nothing here knows
about HTTP or about one API family."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "cancelled", "error"]


@dataclass
class SamplingParams:
    """Per-request sampling. temperature <= 0 is greedy. Penalties look at the tokens
    generated so far (the last `penalty_last_n` of them)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                      # 0: disabled
    min_p: float = 0.0
    repetition_penalty: float = 1.0     # 1.0: disabled
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None             # None: a random seed
    logit_bias: dict[int, float] = field(default_factory=dict)
    grammar: str | None = None          # GBNF; constrains every sampled token
    grammar_root: str = "root"
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


@dataclass
class GenerateRequest:
    """One generation, from any face. Exactly one of `messages` (chat: rendered with the
    model's chat template) and `prompt` (text, or token ids) is set."""

    model: str
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None
    max_tokens: int | None = None       # None: until end of generation or a full context
    stop: list[str] = field(default_factory=list)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stream: bool = False
    # Chat template rendering: per-request template override, extra template variables
    # (enable_thinking, ...), and tool definitions handed to templates that render them.
    chat_template: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    # A model without a chat template reads the message contents as plain text instead
    # of refusing (Ollama's /api/generate: its default template is the prompt itself).
    template_fallback: bool = False
    prefix_tokens: list[int] = field(default_factory=list)  # Ollama `context`: earlier tokens
    # Text prompts: add BOS as the model asks (False when the caller formats it itself).
    add_special: bool = True
    # True: a max_tokens that does not fit the context is cut to what fits (Ollama);
    # False: it is a 400 (OpenAI).
    clamp_to_context: bool = False
    num_ctx: int | None = None          # a smaller context window for this request
    keep_alive: float | None = None     # seconds to keep the model loaded afterwards
    created: float = field(default_factory=time.time)


@dataclass
class TokenLogprob:
    token: int
    text: str
    bytes: bytes
    logprob: float
    top: list[tuple[int, str, bytes, float]] = field(default_factory=list)  # (id, text, bytes, logprob)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0       # prompt tokens reused from the KV cache, not recomputed
    ttft: float = 0.0                   # seconds from arrival to the first token
    tps: float = 0.0                    # generated tokens per second after the first token
    queue_seconds: float = 0.0          # waiting for a slot
    load_seconds: float = 0.0           # loading the model for this request
    prompt_seconds: float = 0.0         # prefill
    generation_seconds: float = 0.0     # first to last token
    total_seconds: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Delta:
    """What one engine step produced for one sequence. `text` is safe to show (complete
    UTF-8, stop strings withheld). `usage` holds the running totals (ttft, tps, tokens so
    far); the last delta has `finish_reason`; a failed sequence ends with `error` set."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    error: BaseException | None = None


@dataclass
class Generation:
    """A finished (non-streamed) generation."""

    model: str
    text: str
    finish_reason: FinishReason
    usage: Usage
    tokens: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    created: float = field(default_factory=time.time)
