"""Speculative decoding inside continuous batching: drafters and the per-sequence policy.

A drafter proposes up to k tokens that should follow a sequence's context; the engine
(generation.py) appends them after the sequence's next token, so ONE target decode verifies
every running sequence's drafts at once (a logits row per draft token). Verification samples
the target's own token at each row with the request's sampler chain and stops at the first
token that differs from the draft: the emitted tokens are exactly those the target would
have produced one by one (greedy or seeded sampling alike; the sampler sees the same rows
in the same order), so speculation changes speed, never output. Rejected drafts leave the
KV cache with `seq_rm` (target here, draft-model cache by prefix comparison next step).

Two drafters:
- NgramDrafter (ngram.py; `draft_model: "ngram"`, and what `auto` drafts with when nothing is
  named): the engine's shared n-gram pool (what any request of this model wrote, this one's
  context included), then prompt lookup, llama-server's ngram mode: the last n tokens of the
  context are looked up earlier in the context, and what followed them there is the draft.
  Free, and good where the output copies the input (rewriting, extraction, code edits, RAG).
- DraftModelDrafter: a smaller generator with the same vocabulary, its own KV cache (one
  sequence per target slot), greedy proposals, k decodes of all sequences together.

Policy per request: `off`; `on` (always, when a drafter is named); `auto` (the default):
speculate while at most AUTO_MAX_BATCH sequences decode; after a draft the target rejected
outright, skip the next 1, 2, 4, ... steps (a full acceptance resets that); stop for the request
once its acceptance falls below AUTO_MIN_ACCEPT. With no draft model named, `auto` drafts with
the n-gram drafter (`implicit`): prompt lookup only on a prompt of AUTO_GROUNDED_PROMPT tokens
or more (a passage to rewrite, code to edit, documents to answer from; a short open prompt
gives nothing to copy), the pool always (its long keys match only real repeats), k adapting to
what is accepted. Calibration `online` moves k with the acceptance rate."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from inferd.scheduling.ngram import NGRAM, NgramDrafter, ngram_lookup

__all__ = ["NGRAM", "NgramDrafter", "ngram_lookup", "Speculation", "DraftModelDrafter", "Drafters"]

log = logging.getLogger("inferd.speculation")

DEFAULT_K = 4
AUTO_NGRAM_K = 8          # implicit auto's first k: a copied passage runs long, and k adapts
MAX_K = 16
AUTO_MAX_BATCH = 4        # above this many decoding sequences the decode is compute-bound: drafts cost
AUTO_MIN_ACCEPT = 0.3     # accepted / drafted below this (after AUTO_WARMUP drafts): stop drafting
AUTO_WARMUP = 16
AUTO_MAX_BACKOFF = 32     # steps auto skips at most after a rejected draft
AUTO_GROUNDED_PROMPT = 64  # prompt tokens from which implicit auto looks drafts up in the prompt
AUTO_NGRAM_MIN = 3        # implicit auto's shortest prompt-lookup match (2-grams recur in any text)


class Drafter(Protocol):
    def propose(self, asks: list[tuple[int, list[int], int, Speculation]]) -> list[list[int]]:
        """For each (seq, context tokens, k, the request's Speculation): up to k proposed next
        tokens. Worker thread only."""
        ...


class DraftBackend(Protocol):
    n_seq: int
    n_batch: int

    def decode(self, entries: list[tuple[int, list[int], int, bool]]) -> list[int]: ...
    def argmax(self, row: int) -> int: ...
    def seq_rm(self, seq: int, p0: int, p1: int) -> bool: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...


class DraftModelDrafter:
    """A draft model's own context, one sequence per target slot. Its cache follows the
    target's: each step the new context is compared with what the draft holds, the differing
    tail (rejected drafts) is removed and the missing tokens are decoded, all sequences together."""

    text_only = True     # a prompt with images would need the draft to see them: not drafted

    def __init__(self, name: str, backend: DraftBackend):
        self.name, self.backend = name, backend
        self.cache: dict[int, list[int]] = {}

    def propose(self, asks: list[tuple[int, list[int], int, Speculation]]) -> list[list[int]]:
        try:
            return self._propose([(seq, ctx, k) for seq, ctx, k, _sp in asks])
        except BaseException:  # a failed draft decode: its cache no longer matches our lists
            self.cache.clear()
            self.backend.clear()
            raise

    def _propose(self, asks: list[tuple[int, list[int], int]]) -> list[list[int]]:
        be = self.backend
        pending: list[tuple[int, list[int], int]] = []  # (seq, tokens still to decode, their first position)
        for seq, ctx, _k in asks:
            held = self.cache.get(seq, [])
            keep = min(_common(held, ctx), len(ctx) - 1)  # the last token is decoded: its row drafts
            if not be.seq_rm(seq, keep, -1):
                be.seq_rm(seq, -1, -1)
                keep = 0
            self.cache[seq] = ctx[:keep]
            pending.append((seq, ctx[keep:], keep))
        rows = self._prefill(pending)
        drafts: list[list[int]] = [[] for _ in asks]
        live = list(range(len(asks)))
        for _step in range(max((k for _s, _c, k in asks), default=0)):
            toks = {i: be.argmax(rows[i]) for i in live}
            for i in live:
                drafts[i].append(toks[i])
            live = [i for i in live if len(drafts[i]) < asks[i][2]]
            if not live:
                break
            entries = [(asks[i][0], [toks[i]], len(self.cache[asks[i][0]]), True) for i in live]
            out = be.decode(entries)
            for i, r in zip(live, out):
                self.cache[asks[i][0]].append(toks[i])
                rows[i] = r
        return drafts

    def _prefill(self, pending: list[tuple[int, list[int], int]]) -> list[int]:
        """Decode every sequence's missing tokens (chunked to the draft's batch); -> the row of
        each one's last token."""
        be = self.backend
        rows = [-1] * len(pending)
        todo: list[list[Any]] = [list(p) for p in pending]  # [seq, tokens left, next position]
        while any(t[1] for t in todo):
            entries, owners, budget = [], [], be.n_batch
            for i, (seq, rest, p0) in enumerate(todo):
                if not rest or budget <= 0:
                    continue
                chunk = rest[:budget]
                entries.append((seq, chunk, p0, len(chunk) == len(rest)))
                owners.append(i)
                budget -= len(chunk)
            out = be.decode(entries)
            for i, (seq, chunk, _p0, last), r in zip(owners, entries, out):
                self.cache[seq].extend(chunk)
                todo[i][1] = todo[i][1][len(chunk):]
                todo[i][2] += len(chunk)
                if last:
                    rows[i] = r
        return rows

    def forget(self, seq: int) -> None:
        self.cache.pop(seq, None)
        self.backend.seq_rm(seq, -1, -1)

    def close(self) -> None:
        self.backend.close()


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Drafters:
    """One engine's draft models by name, built once on first use (`build` loads the model)."""

    def __init__(self) -> None:
        self._by_name: dict[str, DraftModelDrafter] = {}
        self._lock = threading.Lock()

    def get(self, name: str, build: Callable[[], DraftBackend]) -> DraftModelDrafter:
        with self._lock:
            d = self._by_name.get(name)
            if d is None:
                d = self._by_name[name] = DraftModelDrafter(name, build())
            return d

    def close(self) -> None:
        with self._lock:
            for d in self._by_name.values():
                try:
                    d.close()
                except Exception:
                    log.exception("closing draft model %s failed", d.name)
            self._by_name.clear()


@dataclass(eq=False)
class Speculation:
    """One request's speculation: the policy asked for, what happened, and its counts."""

    drafter: Any | None           # NgramDrafter | DraftModelDrafter | None
    policy: str = "auto"
    calibration: str = "none"
    k: int = DEFAULT_K
    implicit: bool = False        # auto chose the n-gram drafter: nothing was named
    disabled_reason: str | None = None
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    skipped_batch: int = 0        # steps where auto held back because the batch was large
    pool_drafted: int = 0         # of drafted/accepted: what the shared pool proposed
    pool_accepted: int = 0
    # drafting state (not copied by dataclasses.replace: each choice of n > 1 drafts on its own)
    lookup: bool = field(default=True, init=False)      # prompt lookup allowed (implicit: grounded prompt)
    grounded: bool | None = field(default=None, init=False)
    share: bool = field(default=True, init=False)       # this request's tokens may go into the pool
    pooled: int = field(default=0, init=False)          # its tokens before this are in the pool
    index: Any = field(default=None, init=False)        # ngram.ContextIndex, built on first lookup
    ngram_min: int = field(default=2, init=False)
    source: str = field(default="", init=False)         # where the last draft came from: pool | prompt
    backoff: int = field(default=0, init=False)
    cooldown: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.policy == "off":
            self.disabled_reason = "policy_off"
        elif self.drafter is None:
            self.disabled_reason = "no_draft_model"
        if self.implicit:
            self.ngram_min = AUTO_NGRAM_MIN

    def begin(self, prompt_tokens: int, share: bool) -> None:
        """On the request's first decode step: whether its prompt grounds prompt lookup, and
        whether its tokens may be shared (not when it asked to leave nothing behind)."""
        self.grounded = prompt_tokens >= AUTO_GROUNDED_PROMPT
        self.lookup = self.grounded or not self.implicit
        self.share = share

    def want(self, n_decoding: int) -> int:
        """Draft tokens to ask for this step (0: none)."""
        if self.disabled_reason is not None:
            return 0
        if self.policy == "auto":
            if n_decoding > AUTO_MAX_BATCH:
                self.skipped_batch += 1
                return 0
            if self.cooldown > 0:
                self.cooldown -= 1
                return 0
        return self.k

    def record(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.steps += 1
        if self.source == "pool":
            self.pool_drafted += drafted
            self.pool_accepted += accepted
        if drafted and (self.calibration == "online" or self.implicit):
            if accepted == drafted:
                self.k = min(MAX_K, self.k + (2 if self.implicit else 1))
            elif accepted * 2 < drafted:
                self.k = max(2 if self.implicit else 1, self.k // 2 if self.implicit else self.k - 1)
        if self.policy != "auto" or not drafted:
            return
        if accepted == 0:  # a wasted verify: wait longer before the next try
            self.backoff = min(AUTO_MAX_BACKOFF, self.backoff * 2 or 1)
            self.cooldown = self.backoff
        elif accepted == drafted:
            self.backoff = 0
        if self.drafted >= AUTO_WARMUP and self.accepted < AUTO_MIN_ACCEPT * self.drafted:
            self.disabled_reason = "low_acceptance"

    def report(self) -> dict[str, Any]:
        reason = self.disabled_reason
        if reason is None and self.drafted == 0:
            if self.skipped_batch:
                reason = "batch_too_large"
            elif self.implicit and self.grounded is False:
                reason = "ungrounded"   # a short open prompt, and nothing in the pool matched
        enabled = reason is None
        return {"policy": self.policy, "calibration": self.calibration,
                "decision": "enabled" if enabled else "disabled", "disabled_reason": reason,
                "draft_model": getattr(self.drafter, "name", None), "speculative_k": self.k,
                "drafted_tokens": self.drafted, "accepted_tokens": self.accepted,
                "pool_drafted_tokens": self.pool_drafted, "pool_accepted_tokens": self.pool_accepted}
