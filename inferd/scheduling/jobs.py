"""What the continuous-batching engine (generation.py) schedules: the Backend Protocol a
runtime satisfies, one Job (a sequence to generate, with its worker-side state), one Slot (a
sequence of the KV cache), the prefix arithmetic of prompt reuse, and the admission checks.
Pure data and small pure functions; the scheduling policy is in generation.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from inferd.errors import ContextOverflow, InvalidInput
from inferd.scheduling.speculation import Speculation
from inferd.scheduling.textout import TextOut
from inferd.scheduling.thinking import ThinkingBudget
from inferd.types import Delta, TokenLogprob, Usage


class Backend(Protocol):
    n_seq: int          # slots
    n_ctx_seq: int      # tokens one sequence may hold
    n_batch: int        # tokens one decode may carry

    def decode(self, entries: list[tuple[int, list[int], int, bool]]) -> list[int]: ...
    def sample(self, sampler: Any, row: int) -> int: ...
    # Record `token` as the sampler's next output without sampling it (a forced token: the
    # end-of-thinking marker at a reasoning budget); False when the sampler's grammar refuses it.
    def force(self, sampler: Any, token: int) -> bool: ...
    def logprob(self, row: int, token: int, top_n: int) -> TokenLogprob: ...
    def piece(self, token: int) -> bytes: ...
    def is_eog(self, token: int) -> bool: ...
    def seq_rm(self, seq: int, p0: int, p1: int) -> bool: ...
    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None: ...
    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None: ...
    def can_shift(self) -> bool: ...
    def clear(self) -> None: ...


class MediaChunk(Protocol):
    """One image of a prompt, as the backend prepared it (leaf-defined)."""

    n_tokens: int

    def close(self) -> None: ...


class MediaBackend(Backend, Protocol):
    def decode_media(self, seq: int, chunk: Any, p0: int, want: bool) -> int: ...


# A set of LoRA adapters with their scales, as the engine groups decodes by it: sorted
# (path, scale) pairs, no zero scales; () is the base weights.
Adapters = tuple[tuple[str, float], ...]


class LoraBackend(Backend, Protocol):
    def set_adapters(self, adapters: Adapters) -> None: ...  # for the decodes that follow


@dataclass(eq=False)
class Job:
    """One sequence to generate. `sink` receives Deltas on the worker thread and must not
    block (the service hands them to its event loop)."""

    prompt: list[int]
    sampler: Any                      # .close(); sampled through Backend.sample
    max_tokens: int
    sink: Callable[[Delta], None]
    stop: list[str] = field(default_factory=list)
    top_logprobs: int | None = None   # None: no logprobs
    arrived: float = field(default_factory=time.perf_counter)
    stream: bool = False
    # engine controls (docs/engine.md): prefix reuse, slot affinity, context shift, speculation
    prompt_cache: bool = True
    cache_key: str | None = None
    compaction: float = 0.0
    pin_slot: int | None = None       # run in this slot only, waiting for it (llama-server's id_slot)
    speculation: Speculation | None = None
    # LoRA: this job's adapter set; None: the engine's default (/set_lora), fixed at admission
    adapters: Adapters | None = None
    own_adapters: bool = False        # the request brought its set: a default change does not concern it
    return_progress: bool = False     # emit prompt_progress deltas while prefilling
    # Images: prompt index of a placeholder span's start -> its media chunk (see module doc).
    media: dict[int, Any] = field(default_factory=dict)
    # n > 1: the other choices of the same prompt, on the first job only (see module doc).
    siblings: list["Job"] = field(default_factory=list)
    # Chat requests whose template can think: counts the thinking tokens, and at a budget the
    # engine forces the end marker (thinking.py).
    thinking: ThinkingBudget | None = None
    # ---- worker state ----
    number: int = 0                   # submission order
    cancelled: bool = False
    slot: int | None = None
    cached: int = 0
    generated: list[int] = field(default_factory=list)
    next_token: int | None = None
    forced: list[int] = field(default_factory=list)  # tokens to emit instead of sampling
    out: TextOut | None = None
    t_admitted: float = 0.0
    t_first: float = 0.0
    t_last: float = 0.0
    done: bool = False
    shifted: bool = False             # context shifted: its cells no longer make a reusable prefix
    forked: bool = False              # a sibling waiting for its group's prefill to be copied

    @property
    def group(self) -> list["Job"]:
        return [self, *self.siblings]

    def usage(self, now: float) -> Usage:
        n = len(self.generated)
        gen_s = (self.t_last - self.t_first) if self.t_first else 0.0
        return Usage(prompt_tokens=len(self.prompt), completion_tokens=n, cached_prompt_tokens=self.cached,
                     reasoning_tokens=self.thinking.count if self.thinking is not None else 0,
                     ttft=(self.t_first - self.arrived) if self.t_first else 0.0,
                     tps=(n - 1) / gen_s if n > 1 and gen_s > 0 else 0.0,
                     queue_seconds=max(0.0, (self.t_admitted or now) - self.arrived),
                     prompt_seconds=(self.t_first - self.t_admitted) if self.t_first else 0.0,
                     generation_seconds=gen_s, total_seconds=now - self.arrived)


@dataclass
class Slot:
    id: int
    cache: list[int] = field(default_factory=list)  # tokens whose KV cells this sequence holds
    job: Job | None = None
    last_used: float = 0.0
    key: str | None = None                          # prompt_cache_key of the last job here
    adapters: Adapters = ()                         # the LoRA set its cells were computed with

    @property
    def shareable(self) -> bool:
        """May another job reuse this slot's cells? Not a private (prompt_cache: false) or a
        shifted sequence's."""
        return self.job is None or (self.job.prompt_cache and not self.job.shifted)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def snap_to_media(job: Job, keep: int) -> int:
    """A reusable prefix length that does not end inside an image span."""
    for start, chunk in job.media.items():
        if start < keep < start + chunk.n_tokens:
            return start
    return keep


def refusal(job: Job, n_slots: int, n_ctx: int) -> tuple[type[InvalidInput], str, str | None] | None:
    """Why the engine refuses `job` at admission, as (error class, message, param), or None.
    The engine makes one exception per job of the group from it."""
    if len(job.group) > n_slots:
        return InvalidInput, f"n={len(job.group)} is more than the {n_slots} sequences this model runs at once", "n"
    if len(job.prompt) >= n_ctx or not job.prompt:
        return ContextOverflow, f"the prompt has {len(job.prompt)} tokens; this model's context holds {n_ctx}", None
    if job.pin_slot is not None and not 0 <= job.pin_slot < n_slots:
        return (InvalidInput, f"id_slot {job.pin_slot} does not exist: this model has {n_slots} slots "
                f"(0 to {n_slots - 1}, or -1 for any)", "id_slot")
    return None
