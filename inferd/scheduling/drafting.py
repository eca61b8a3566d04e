"""The engine's side of speculation: a step's decode entries get each speculating sequence's
draft, and the target's rows for [next token, *draft] are verified with the request's own
sampler. Apart from speculation.py (drafters and the per-request policy) because it reads the
job (jobs.py), which holds a Speculation: one direction of import."""

from __future__ import annotations

from typing import Any, cast

from inferd.errors import InferdError
from inferd.scheduling.jobs import Backend, Job


def add_drafts(backend: Backend, entries: list[tuple[int, list[int], int, bool]], jobs: list[Job]) -> None:
    """Append each speculating sequence's draft to its decode entry (want = 1 + draft tokens),
    within the decode's token budget, the context and the request's max_tokens."""
    n_ctx, budget = backend.n_ctx_seq, backend.n_batch - len(entries)
    by_drafter: dict[int, tuple[Any, list[tuple[int, list[int], int, Any]], list[int]]] = {}
    for i, job in enumerate(jobs):
        sp = job.speculation
        if sp is None or budget <= 0:
            continue
        if sp.grounded is None:
            sp.begin(len(job.prompt), job.prompt_cache)
        if job.forced or (job.thinking is not None and job.thinking.bounding):
            continue  # a reasoning budget may cut the block at any token: no draft runs past it
        if job.media and sp.drafter is not None and sp.drafter.text_only:
            sp.disabled_reason = "media"
            continue
        k = min(sp.want(len(jobs)), budget, n_ctx - entries[i][2] - 2, job.max_tokens - len(job.generated) - 1)
        if k <= 0:
            continue
        budget -= k
        _d, asks, idx = by_drafter.setdefault(id(sp.drafter), (sp.drafter, [], []))
        asks.append((entries[i][0], job.prompt + job.generated, k, sp))
        idx.append(i)
    for drafter, asks, idx in by_drafter.values():
        for i, draft in zip(idx, drafter.propose(asks)):
            if draft:
                seq, toks, p0, _want = entries[i]
                # the last field counts the rows wanted: the next token's and each draft's
                entries[i] = cast(Any, (seq, toks + draft, p0, 1 + len(draft)))


def verify_drafts(backend: Backend, sampler: Any, toks: list[int], base: int
                  ) -> tuple[list[int], int, InferdError | None]:
    """The target's rows for [next token, *draft] start at `base`: sample each in order with
    the request's own sampler and stop at the first that differs from the draft (or ends the
    sequence). -> (the samples, how many equal the draft, the sampler's own dead end if one
    came after them)."""
    draft = toks[1:]
    sampled: list[int] = []
    accepted = 0  # the samples that equal the draft (an end-of-generation token is no cell to keep)
    for j in range(len(draft) + 1):
        try:
            tok = backend.sample(sampler, base + j)
        except InferdError as e:
            return sampled, accepted, e
        sampled.append(tok)
        if j == len(draft) or tok != draft[j] or backend.is_eog(tok):
            break
        accepted += 1
    return sampled, accepted, None


def remember(ngram: Any, job: Job) -> None:
    """A finished job's prompt and answer go into the engine's n-gram pool (what its drafts
    did not already write), unless it asked to leave nothing behind (`prompt_cache: false`)."""
    if not job.prompt_cache or ngram.pool is None:
        return
    sp = job.speculation
    start = sp.pooled if sp is not None and sp.drafter is ngram else 0
    ngram.remember(job.prompt + job.generated, start)
