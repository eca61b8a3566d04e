"""Engine dataclasses shared by the service, the scheduler and the runtimes.

Faces convert their wire formats to these (api/*/convert.py) and back; nothing here knows
about HTTP or about one API family."""

from __future__ import annotations

import builtins
import json
import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal


def new_call_id() -> str:
    """A fresh tool call id, `call_` + 24 hex digits."""
    return "call_" + secrets.token_hex(12)


@dataclass
class ToolCall:
    """A parsed tool call (chat/tool_parser.py parses them, the faces write them). `arguments`
    is a JSON string encoding an object (OpenAI's shape)."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)
    index: int = 0

    @property
    def args(self) -> dict:
        return json.loads(self.arguments)

    def openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def openai_delta(self) -> dict:
        """One `delta.tool_calls[]` item carrying the whole call (id, name and arguments)."""
        return {"index": self.index, **self.openai()}

    def ollama(self) -> dict:
        """Ollama's `message.tool_calls[]`: arguments as an object, not a string."""
        return {"function": {"index": self.index, "name": self.name, "arguments": self.args}}


# "tool_calls": the model stopped on its own after calling tools (chat requests only).
FinishReason = Literal["stop", "length", "cancelled", "tool_calls"]


# The sampler stages SamplingParams.samplers may order (llama-server's names), in llama.cpp's
# default order. A stage whose setting is off adds nothing to the chain.
SAMPLER_STAGES = ("penalties", "top_k", "typ_p", "top_p", "min_p", "temperature")


@dataclass
class SamplingParams:
    """Per-request sampling. temperature <= 0 is greedy. Penalties look at the tokens
    generated so far (the last `penalty_last_n` of them)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                      # 0: disabled
    min_p: float = 0.0
    typical_p: float = 1.0              # locally typical sampling; 1.0: disabled
    repetition_penalty: float = 1.0     # 1.0: disabled
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None             # None: a random seed
    logit_bias: dict[int, float] = field(default_factory=dict)
    grammar: str | None = None          # GBNF; constrains every sampled token
    grammar_root: str = "root"
    ignore_eos: bool = False
    grammar_endless: bool = False       # the grammar never completes: it may run with ignore_eos
    logprobs: bool = False
    top_logprobs: int = 0
    # The order of the chain after logit bias (llama-server's `samplers`): SAMPLER_STAGES
    # names; one left out is not used. None: SAMPLER_STAGES' order.
    samplers: tuple[str, ...] | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


@dataclass
class ChatOptions:
    """The chat features of a request beyond plain messages, as the request gave them:
    tools, structured output, a raw grammar, thinking. The service turns them into a plan
    (inferd.chat.plan): template variables, a grammar for sampling, and a parser that splits
    the output into reasoning, content and tool calls. Every field is validated there.

    tools: OpenAI function-tool definitions (Ollama uses the same shape).
    tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name"}}.
    response_format: OpenAI's {"type": "text" | "json_object" | "json_schema", ...}.
    json_format: Ollama's `format`: "json" or a JSON schema object.
    grammar: raw GBNF (OpenAI / Antfly extension).
    enable_thinking: True / False / None (the template's default).
    reasoning_effort: "none" | "minimal" | "low" | "medium" | "high" (OpenAI's levels); "none" turns
        thinking off, another level turns it on where the template can think, and each maps to a
        thinking budget (inferd.chat.reasoning.effort_budget).
    reasoning_budget: tokens of thinking allowed (None: the effort's, else the server's default);
        at the budget the engine writes the end-of-thinking marker itself and the answer goes on.
    thinking_param: the request field to name in errors ("enable_thinking" or "think").
    tool_call_ids: "optional" where the face's history carries no call ids (Ollama)."""

    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    json_format: Any = None
    grammar: str | None = None
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    reasoning_budget: int | None = None
    thinking_param: str = "enable_thinking"
    tool_call_ids: Literal["required", "optional"] = "required"


CACHE_DTYPES = ("f16", "bf16", "q8_0", "q4_0", "f32")


@dataclass
class EngineControls:
    """Antfly's per-request engine controls (docs/engine.md). None: the
    model's default. Validated against the loaded model by the service (a value the model
    cannot honour is a 400 naming the field), carried to the engine's Job."""

    cache_dtype: str | None = None             # must equal the loaded model's KV type
    prompt_cache: bool = True                  # False: no prefix reuse, nothing left behind
    prompt_cache_key: str | None = None        # slot affinity
    cache_compaction_ratio: float = 0.0        # context shift share; 0: stop with "length"
    draft_model: str | None = None             # "ngram" or a served generator; None: manifest's
    speculative_k: int | None = None
    speculation_policy: Literal["auto", "on", "off"] = "auto"
    speculation_calibration: Literal["none", "online"] = "none"
    slot: int | None = None                    # run in this slot, waiting for it (llama-server's id_slot)


@dataclass
class Infill:
    """Fill-in-the-middle (llama-server's /infill, Ollama's and OpenAI's `suffix`): the text
    before and after the cursor, repository context chunks (filename, text), and `prompt`,
    the start of the middle. The prompt is built from the model's own FIM tokens
    (service/fim.py)."""

    prefix: str = ""
    suffix: str = ""
    extra: list[tuple[str, str]] = field(default_factory=list)
    prompt: str = ""


@dataclass(frozen=True)
class LoraRef:
    """One adapter of a request's set (llama-server's `lora: [{id, scale}]`): `id` indexes
    the model's adapters in name order (GET /lora-adapters), or `name` names one."""

    id: int | None = None
    name: str | None = None
    scale: float = 1.0


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
    # Chat template rendering: per-request template override and extra template variables
    # (chat_template_kwargs). Tools, thinking and output constraints are in `chat`.
    chat_template: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    chat: ChatOptions | None = None
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
    n: int = 1                          # choices: the prompt is prefilled once, then n sequences decode
    keep_alive: float | None = None     # seconds to keep the model loaded afterwards
    engine: EngineControls = field(default_factory=EngineControls)
    created: float = field(default_factory=time.time)
    infill: Infill | None = None        # fill-in-the-middle: the prompt comes from these parts
    infill_param: str = "input_suffix"  # the wire field a model without FIM tokens is refused on
    lora: list[LoraRef] | None = None   # this request's adapter set; None: the model's default
    return_progress: bool = False       # stream prompt_progress deltas while the prompt is prefilled


@dataclass
class TokenLogprob:
    token: int
    text: str
    bytes: bytes
    logprob: float
    top: list[tuple[int, str, builtins.bytes, float]] = field(default_factory=list)  # (id, text, bytes, logprob)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0       # prompt tokens reused from the KV cache, not recomputed
    reasoning_tokens: int = 0           # completion tokens inside the thinking block (chat requests)
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


def total_usage(usages: list[Usage]) -> Usage:
    """n > 1: the prompt once, every choice's completion tokens, the slowest choice's times."""
    if len(usages) == 1:
        return usages[0]
    u = replace(usages[0], completion_tokens=sum(x.completion_tokens for x in usages),
                reasoning_tokens=sum(x.reasoning_tokens for x in usages))
    u.total_seconds = max(x.total_seconds for x in usages)
    u.generation_seconds = max(x.generation_seconds for x in usages)
    return u


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
    # Chat requests: `text` is the answer only; reasoning and completed tool calls come
    # separately (text that is part of a call is never in `text`).
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    index: int = 0                      # which choice (n > 1)
    stop_word: str | None = None        # the last delta of a sequence a stop string ended
    # return_progress: prompt processing so far (total, cache, processed, time_ms), no text
    progress: tuple[int, int, int, float] | None = None


@dataclass
class Generation:
    """A finished (non-streamed) generation. For chat: `text` is the answer (content),
    `reasoning` the thinking (None when there was none), `tool_calls` the parsed calls."""

    model: str
    text: str
    finish_reason: FinishReason
    usage: Usage
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    created: float = field(default_factory=time.time)
    # {policy, calibration, decision, disabled_reason, drafted_tokens, accepted_tokens}
    speculation: dict[str, Any] | None = None
    index: int = 0
    stop_word: str | None = None        # the stop string that ended it (finish_reason "stop")
    # n > 1: choices 1..n-1 (each a Generation with its own text, finish_reason, logprobs);
    # `usage` of the first counts the prompt once and the completions of all of them.
    choices: list["Generation"] = field(default_factory=list)


@dataclass(frozen=True)
class Image:
    """A decoded RGB image for a vision generator (8-bit, row-major, height x width x 3)."""

    rgb: bytes
    width: int
    height: int

    @property
    def digest(self) -> str:
        import hashlib

        return hashlib.sha256(self.rgb + f"{self.width}x{self.height}".encode()).hexdigest()


# ---- readers (OCR and document understanding: /ai/v1/read) ----------------------------------
@dataclass
class ReadItem:
    """One image to read: RGB uint8 [height, width, 3], already admitted and decoded."""

    image: Any
    prompt: str | None = None           # a task prompt / question, for models that take one
    max_tokens: int = 256
    stop: Any = None                    # threading.Event set when the client went away: decoding stops


@dataclass
class TextRegion:
    text: str
    bbox: tuple[float, float, float, float]   # x1, y1, x2, y2 in source pixels
    confidence: float
    label: str | None = None
    points: list[float] | None = None   # x, y, x, y, ...: a quad box or polygon (Florence-2), when not a plain box


@dataclass
class ReadOutput:
    text: str
    fields: dict[str, str] | None = None      # Donut-style <s_key>value</s_key>, keys flattened with "."
    regions: list[TextRegion] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens: list[int] = field(default_factory=list)  # generated token ids (encoder-decoder readers)
