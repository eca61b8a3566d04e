"""The continuous-batching loop of one generator model, on its own worker thread.

Every step is ONE decode call that carries the next token of every generating sequence
plus chunks of prompts still being prefilled, so a long prompt never stalls running
streams for more than one step, and many chats share each pass over the weights.

Slots: `n_seq` sequences live in the model's KV cache at once; a finished sequence leaves
its tokens there as a prompt cache. A new job takes the free slot whose cached tokens
share the longest prefix with its prompt, or borrows a longer prefix from any other slot
(live or idle) by copying cells, and prefills only the rest: a multi-turn chat does not
recompute its history. Jobs beyond the slots wait in arrival order.

n > 1 (several choices for one prompt): the first job of the group carries the others as
`siblings`. The group is admitted when it has a free slot for each member; only the first
prefills the prompt, and when that prefill ends its KV cells are copied (`seq_cp`, shared
cells, no recompute) to every sibling's sequence, each sibling samples its own first token
from the same logits, and from then on all of them decode as ordinary sequences in the
same batch.

Media (images): a multimodal prompt holds, for each image, a span of placeholder ids (negative,
derived from the image's hash: never a real token) and the job maps the span's start to a
media chunk. A span is decoded whole, on the worker, by `Backend.decode_media` (encode the
image, then decode its embeddings), at most one span per step and before that step's token
decode, so running streams pause for at most one image. Because the placeholders are the
image's hash, prefix reuse works across turns: a follow-up about the same image finds its
cells cached and neither encodes nor decodes it again. A cached prefix never ends inside a
span (it is cut back to the span's start).

LoRA per request: each job carries an adapter set (its own, or the engine's default fixed
at admission). llama.cpp applies adapters per context, so a step decodes the sequences of
one set; with several sets running, they take turns in time slices sized by the measured
cost of a switch (lora_slices.py), so the users of one adapter never wait for another's to
finish. A slot's cached cells belong to the set they were computed with: a prefix is
reused (or lent) only within the same set.

The backend (runtimes/llama_cpp/generator.py) does the native work; this module is the
scheduling policy and knows nothing about llama.cpp. Its collaborators: jobs.py (the data,
admission checks), state_tiers.py (the RAM and disk prompt-cache tiers), speculation.py
(drafts and their verification), idle_calls.py (calls between jobs), lora_slices.py."""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import inferd.defaults as D
from inferd.errors import InferdError, InferenceFailed, copy_error
from inferd.observability.stats import GenStats
from inferd.scheduling.disk_cache import DiskCache
from inferd.scheduling.lora_slices import AdapterSlices
from inferd.scheduling.drafting import add_drafts, remember, verify_drafts
from inferd.scheduling.ngram import NgramDrafter, NgramPool
from inferd.scheduling.speculation import Drafters
from inferd.scheduling.state_cache import HostCache
from inferd.scheduling.state_tiers import StateTiers
from inferd.scheduling.textout import TextOut
from inferd.scheduling.worker_line import WorkerLine, emit, record_finish
from inferd.scheduling.wakeups import step_wakeups
from inferd.scheduling.jobs import (Adapters, Backend, Job, LoraBackend, MediaBackend, MediaChunk, Slot, common_prefix,
                                    refusal, snap_to_media)
from inferd.types import Delta, FinishReason, TokenLogprob

__all__ = ["Backend", "GenerationEngine", "Job", "MediaBackend", "MediaChunk", "Slot", "common_prefix"]

log = logging.getLogger("inferd.generation")


N_KEEP = 1  # context shift keeps the first token (BOS, or the prompt's first)


class GenerationEngine:
    """`max_waiting` bounds the jobs waiting for a slot: beyond it `submit` refuses with
    Overloaded (503 + retry_after_ms), so no request can grow the queue without bound."""

    def __init__(self, backend: Backend, name: str = "model", max_waiting: int = 1024, host_cache_bytes: int = 0,
                 disk_cache: DiskCache | None = None, ngram_pool: int = D.SPEC_POOL_ENTRIES,
                 auto_ngram: bool = D.SPEC_AUTO):
        self.backend, self.name = backend, name
        # --cache-ram and --cache-dir: the prompt-cache tiers behind the slots (state_tiers.py)
        self.tiers = StateTiers(backend, host_cache_bytes, disk_cache)
        self.slots = [Slot(i) for i in range(backend.n_seq)]
        # submit, cancel, call_when_idle, close and the worker's loop (worker_line.py)
        self.line = WorkerLine(name, max_waiting)
        self.waiting = self.line.waiting  # admission order; the worker's alone
        self.steps = 0
        self.batch_sizes: collections.Counter[int] = collections.Counter()  # sequences per decode
        self._media_slot: Slot | None = None  # the slot whose image span this step decodes
        self.default_adapters: Adapters = ()  # /set_lora's choice, for jobs without their own set
        self._applied: Adapters = ()  # the set the context decodes with now
        self.lora_slices = AdapterSlices()
        self.stats = GenStats()  # replaced by the observer's per-model object once loaded (/metrics)
        self.drafters = Drafters()  # draft models of this engine (speculation.py), worker thread only
        # n-gram drafting with the pool this engine's slots share (ngram.py); `auto_ngram`: what
        # speculation_policy auto drafts with when a request names no draft model
        self.ngram = NgramDrafter(NgramPool(ngram_pool) if ngram_pool > 0 else None)
        self.auto_ngram = auto_ngram
        self._thread = threading.Thread(target=self._run, name=f"gen:{name}", daemon=True)
        self._thread.start()

    # ---- any thread -------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        self.line.submit([job], self.stats)  # n > 1: the siblings ride on the first job

    def cancel(self, job: Job) -> None:
        """Stop `job` at the next step (no more tokens are generated for it)."""
        self.line.cancel(job)

    def call_when_idle(self, fn: Callable[[], Any], reset_cache: bool = True,
                       default_only: bool = False) -> concurrent.futures.Future:
        return self.line.call_when_idle(fn, reset_cache, default_only)

    @property
    def dead(self) -> BaseException | None:
        return self.line.dead

    @property
    def max_waiting(self) -> int:
        return self.line.max_waiting

    @property
    def host_cache(self) -> HostCache | None:
        return self.tiers.host

    @property
    def disk_cache(self) -> DiskCache | None:
        return self.tiers.disk

    @property
    def active(self) -> int:
        return sum(1 for s in self.slots if s.job is not None)

    @property
    def queued(self) -> int:
        return self.line.queued

    def close(self, timeout: float = 60.0) -> bool:
        """Stop the worker: waiting and running jobs fail with ModelUnloaded (retryable).
        True once the worker thread has ended; False if it is still inside a step after
        `timeout`, and then the caller must not free the backend's native state under it."""
        alive = self.line.close(self._thread, timeout)
        self.tiers.close()
        return alive

    # ---- worker thread ----------------------------------------------------------------------
    def _run(self) -> None:
        # a failed decode loses every sequence in the batch, and the cache it wrote
        self.line.run(self._step, lambda: self.active, self._fail_all, after_failed_step=self._reset_cache)

    def _step(self) -> None:
        now = time.perf_counter()
        self._drop_cancelled(now)
        if self.line.idle_calls.due([s.job for s in self.slots if s.job is not None], self.waiting):
            self.line.idle_calls.run_first(self._reset_cache, self.tiers.refresh_disk)  # (a LoRA switch: another identity)
        self._admit(now)
        present = {s.adapters for s in self.slots if s.job is not None}
        if not present:
            return
        # one adapter set per step, the sets taking turns in time slices (lora_slices.py)
        ad = self.lora_slices.pick(present, self._applied, now)
        switched = ad != self._applied
        if not self._use_adapters(ad, [s.job for s in self.slots if s.job is not None and s.adapters == ad]):
            return
        entries, jobs = self._build_batch(ad)
        if self._media_slot is not None:
            self._decode_media(self._media_slot, now)
        if entries:
            self.steps += 1
            t0 = time.perf_counter()
            self._decode_group(entries, jobs)
            self.lora_slices.observe(time.perf_counter() - t0, switched)

    def _use_adapters(self, adapters: Adapters, jobs: list[Job]) -> bool:
        """Apply `adapters` for the next decode; False (and `jobs` failed) when they cannot be."""
        if adapters == self._applied:
            return True
        try:
            cast(LoraBackend, self.backend).set_adapters(adapters)
        except InferdError as e:
            self._applied = cast(Adapters, None)  # unknown: set again before the next decode
            for job in jobs:  # every job of the set, siblings waiting for their fork included
                if not job.done:
                    self._fail_job(job, copy_error(e, "applying the LoRA adapters failed"))
            return False
        self._applied = adapters
        return True

    def _decode_group(self, entries: list[tuple[int, list[int], int, bool]], jobs: list[Job]) -> None:
        """ONE decode for the entries of one adapter set, then each job's token (its rows are
        valid only until the next decode)."""
        rows = self.backend.decode(entries)
        self.batch_sizes[len(entries)] += 1
        self.stats.batch.observe(len(entries))
        now = time.perf_counter()
        with step_wakeups():  # the listeners' loops wake once, after the last token (wakeups.py)
            self._take_rows(entries, jobs, rows, now)

    def _take_rows(self, entries: list[tuple[int, list[int], int, bool]], jobs: list[Job], rows: list[int],
                   now: float) -> None:
        for (seq, toks, _p0, want), job, row in zip(entries, jobs, rows):
            if want > 1:
                self._verify(job, toks, row, now)
                continue
            self.slots[seq].cache.extend(toks)
            if job.return_progress and job.next_token is None and not job.generated:
                emit(job, Delta(progress=(len(job.prompt), job.cached, len(self.slots[seq].cache),
                                                round((now - job.t_admitted) * 1e3, 3))))
            if row >= 0:
                if not job.generated and self.tiers.checkpoints:  # prefill done: the prompt's state,
                    self.tiers.checkpoint(job, self.slots[seq])    # resumable on SWA models
                if job.next_token is None and job.siblings:  # prefill done: hand it to the siblings
                    self._fork(job, row, now)
                self._on_token(job, row, now)

    def _fork(self, job: Job, row: int, now: float) -> None:
        n = len(job.prompt)
        for sib in job.siblings:
            if not sib.forked or sib.done:
                continue
            sib.forked = False
            assert job.slot is not None and sib.slot is not None
            self.backend.seq_cp(job.slot, sib.slot, 0, n)
            self.slots[sib.slot].cache = list(job.prompt)
            sib.cached = n  # computed once, for the whole group
            self._on_token(sib, row, now)

    def _drop_cancelled(self, now: float) -> None:
        for job in [j for j in self.waiting if j.cancelled]:
            self.waiting.remove(job)
            for j in job.group:
                self._finish(j, "cancelled", now)
        for slot in self.slots:
            if slot.job is not None and slot.job.cancelled:
                self._finish(slot.job, "cancelled", now)

    def _admit(self, now: float) -> None:
        call = self.line.idle_calls.first
        while self.waiting:
            free = [s for s in self.slots if s.job is None]
            # jobs after a pending idle call wait for it (those it concerns: the first other one goes)
            i = next((k for k, j in enumerate(self.waiting) if call is None or not call.holds(j)), None)
            if not free or i is None:
                return
            job = self.waiting[i]
            problem = refusal(job, len(self.slots), self.backend.n_ctx_seq)
            if problem is None and job.pin_slot is not None and self.slots[job.pin_slot].job is not None:
                return  # waits for its slot; later jobs keep their place behind it (as llama-server defers)
            if problem is None and len(free) < len(job.group):
                return  # a group starts together; later jobs keep their place behind it
            del self.waiting[i]
            if problem is not None:
                cls, message, param = problem
                for j in job.group:  # one exception instance per job
                    emit(j, Delta(error=cls(message, param)))
                    self._close_job(j)
                continue
            self._assign(job, free, now)
            for sib in job.siblings:
                slot = next(s for s in self.slots if s.job is None)
                sib.slot, sib.t_admitted, sib.out, sib.forked = slot.id, now, TextOut(sib.stop), True
                slot.job, slot.last_used = sib, now
                self.backend.seq_rm(slot.id, -1, -1)  # its old cells are no prefix to lend any more
                slot.cache, slot.adapters = [], self.slots[job.slot].adapters if job.slot is not None else ()
                sib.adapters = job.adapters
            if job.max_tokens <= 0:
                for j in job.group:
                    self._finish(j, "length", now)

    def _assign(self, job: Job, free: list[Slot], now: float) -> None:
        prompt = job.prompt
        if job.adapters is None:  # the default set as it is now: a later /set_lora does not change it
            job.adapters = self.default_adapters
        ad = job.adapters
        limit = snap_to_media(job, len(prompt) - 1) if job.prompt_cache else 0  # the last prompt token (or image) is decoded

        def reuse(s: Slot) -> int:  # cells computed with another adapter set are no prefix of this job's
            return snap_to_media(job, min(common_prefix(s.cache, prompt), limit)) if s.adapters == ad else 0
        key = job.cache_key
        # prompt_cache_key: its own slot first; slots another key holds last (a longer prefix
        # elsewhere is still borrowed below, by copying cells)
        own = self.slots[job.pin_slot] if job.pin_slot is not None else max(
            free, key=lambda s: (key is not None and s.key == key, s.key is None or s.key == key, reuse(s), -s.last_used))
        keep = reuse(own)
        donor, donor_keep = None, keep
        for s in self.slots:
            if s is not own and s.shareable:
                n = reuse(s)
                if n > donor_keep:
                    donor, donor_keep = s, n
        restored, keep = self.tiers.restore(job, own, limit, keep, donor_keep, self.stats)
        if restored:
            pass
        elif donor is not None:  # share the cells of a longer cached prefix (live or idle sequence)
            self.backend.seq_rm(own.id, -1, -1)
            self.backend.seq_cp(donor.id, own.id, 0, donor_keep)
            own.cache = prompt[:donor_keep]
            keep = donor_keep
        elif not self.backend.seq_rm(own.id, keep, -1):  # partial removal unsupported: start over
            self.backend.seq_rm(own.id, -1, -1)
            keep = 0
            own.cache = []
        else:
            own.cache = own.cache[:keep]
        if keep and not self.tiers.reusable(own, keep):  # a sliding-window cache lacks cells this prefix needs
            self.backend.seq_rm(own.id, -1, -1)
            keep, own.cache = 0, []
            self.stats.prompt_cache_refused += 1
        job.slot, job.cached, job.t_admitted = own.id, keep, now
        own.adapters = ad
        own.key = key if key is not None else own.key
        self.stats.prompt_tokens += len(prompt)
        self.stats.cached_tokens += keep
        job.out = TextOut(job.stop)
        own.job, own.last_used = job, now

    def _build_batch(self, adapters: Adapters = ()) -> tuple[list[tuple[int, list[int], int, bool]], list[Job]]:
        """This step's entries: the sequences of adapter set `adapters` (the others wait for
        their turn)."""
        entries: list[tuple[int, list[int], int, bool]] = []
        jobs: list[Job] = []
        prefilling: list[Slot] = []
        for slot in self.slots:
            job = slot.job
            if job is None or slot.adapters != adapters:
                continue
            if job.next_token is not None:
                entries.append((slot.id, [job.next_token], len(slot.cache), True))
                jobs.append(job)
            elif job.forked:
                continue  # its cells come from the group's first job (_fork)
            else:
                prefilling.append(slot)
        if any(j.speculation is not None for j in jobs):
            add_drafts(self.backend, entries, jobs)  # speculation.py
        budget = self.backend.n_batch - sum(len(e[1]) for e in entries)
        self._media_slot = None
        for slot in sorted(prefilling, key=lambda s: s.job.t_admitted if s.job else 0.0):  # oldest prompt first
            job = slot.job
            assert job is not None
            rest = job.prompt[len(slot.cache):]
            if rest and rest[0] < 0:  # an image span: decoded on its own, one per step
                if self._media_slot is None:
                    self._media_slot = slot
                continue
            if budget <= 0:
                continue
            text = next((i for i, t in enumerate(rest) if t < 0), len(rest))  # up to the next image
            chunk = rest[:min(budget, text)]
            entries.append((slot.id, chunk, len(slot.cache), len(chunk) == len(rest)))
            jobs.append(job)
            budget -= len(chunk)
        return entries, jobs

    def _decode_media(self, slot: Slot, now: float) -> None:
        """Encode and decode the image span at the head of `slot`'s remaining prompt."""
        job = slot.job
        assert job is not None
        start = len(slot.cache)
        chunk = job.media.get(start)
        if chunk is None:
            raise InferenceFailed(f"no image for prompt position {start}")
        end = start + chunk.n_tokens
        want = end == len(job.prompt)  # the prompt ends with this image: its last row starts generation
        row = cast(MediaBackend, self.backend).decode_media(slot.id, chunk, start, want)
        slot.cache.extend(job.prompt[start:end])
        if want:
            if job.siblings:  # n > 1 on a prompt that ends with an image: the choices fork here
                self._fork(job, row, now)
            self._on_token(job, row, now)

    def _on_token(self, job: Job, row: int, now: float) -> int | None:
        """Sample one token from `row`, emit it, finish the job or set its next token.
        None: the job failed here (its own grammar dead end).

        A reasoning budget spent inside the thinking block queues the end marker's tokens:
        they are emitted instead of sampled, one per step, so each is decoded into the KV
        cache like a sampled token and the answer is sampled after them. The sampler records
        them (penalties, grammar); a grammar that refuses the marker ends the sequence with
        "length" (the budget is a limit, like max_tokens)."""
        t = job.thinking
        if t is not None and not job.forced and t.due():
            job.forced = t.close()
        if job.forced:
            forced = job.forced.pop(0)
            if not self.backend.force(job.sampler, forced):
                job.forced = []
                self._finish(job, "length", now)
                return None
            self._take(job, forced, row, now, forced=True)
            return forced
        tok = self._sample(job, row)
        if tok is not None:
            self._take(job, tok, row, now)
        return tok

    def _sample(self, job: Job, row: int) -> int | None:
        """The job's sampler on `row`; None (and the job failed) on its own dead end
        (a grammar that allows no token)."""
        try:
            return self.backend.sample(job.sampler, row)
        except InferdError as e:
            self._fail_job(job, e)
            return None

    def _fail_job(self, job: Job, e: InferdError) -> None:
        job.next_token = None
        emit(job, Delta(error=e))
        self._close_job(job)

    def _take(self, job: Job, tok: int, row: int, now: float, forced: bool = False) -> None:
        """Emit a sampled (or forced) token; finish the job or set its next token."""
        be = self.backend
        if not job.t_first:
            job.t_first = now
            self.stats.ttft.observe(now - job.arrived)
        else:
            self.stats.itl.observe(now - job.t_last)
        job.t_last = now
        if be.is_eog(tok):
            job.next_token = None
            self._finish(job, "stop", now)
            return
        lp = [be.logprob(row, tok, job.top_logprobs)] if job.top_logprobs is not None else []
        job.generated.append(tok)
        self.stats.generated_tokens += 1
        assert job.out is not None and job.slot is not None  # set when the job got its slot
        piece = be.piece(tok)
        text = job.out.feed(piece)
        if job.thinking is not None:
            job.thinking.feed(piece, forced)
        slot = self.slots[job.slot]
        if job.out.stopped:
            self._finish(job, "stop", now, text, [tok], lp)
        elif len(job.generated) >= job.max_tokens or (len(slot.cache) + 1 > be.n_ctx_seq
                                                       and not self._shift(job, slot)):
            self._finish(job, "length", now, text, [tok], lp)
        else:
            job.next_token = tok
            emit(job, Delta(text=text, tokens=[tok], logprobs=lp, usage=job.usage(now)))

    # ---- speculation (speculation.py) and context shift ----------------------------------------
    def _verify(self, job: Job, toks: list[int], row: int, now: float) -> None:
        """The target's rows for [next token, *draft] (verify_drafts); the rejected drafts'
        cells leave the KV cache. The counts are recorded before any of these
        tokens is emitted, so a job that finishes here reports them on its final delta."""
        assert job.slot is not None
        slot = self.slots[job.slot]
        draft, base, p0 = toks[1:], row - (len(toks) - 1), len(slot.cache)
        sampled, accepted, failed = verify_drafts(self.backend, job.sampler, toks, base)
        slot.cache.append(toks[0])
        slot.cache.extend(draft[:accepted])
        self.backend.seq_rm(slot.id, p0 + 1 + accepted, -1)
        if job.speculation is not None:
            job.speculation.record(len(draft), accepted)
        self.stats.drafted_tokens += len(draft)
        self.stats.accepted_tokens += accepted
        for j, tok in enumerate(sampled):
            self._take(job, tok, base + j, now)
            if job.next_token is None:  # finished: the later samples are not emitted
                return
        if failed is not None:
            self._fail_job(job, failed)

    def _shift(self, job: Job, slot: Slot) -> bool:
        """llama.cpp's context shift: drop `compaction` of the tokens after the first N_KEEP
        and slide the rest down, so generation goes on. False (stop with length) when off,
        unsupported, or when another running sequence shares these cells (moving shared
        cells would move that sequence's tokens too)."""
        n = len(slot.cache)
        if job.compaction <= 0 or not self.backend.can_shift() or n <= N_KEEP + 1:
            return False
        for other in self.slots:
            if other is not slot and common_prefix(other.cache, slot.cache) > N_KEEP:
                if other.job is not None:
                    return False
                self.backend.seq_rm(other.id, -1, -1)  # an idle prefix cache sharing cells: drop it
                other.cache = []
        drop = max(1, int((n - N_KEEP) * job.compaction))
        be = self.backend
        be.seq_rm(slot.id, N_KEEP, N_KEEP + drop)
        be.seq_add(slot.id, N_KEEP + drop, -1, -drop)
        del slot.cache[N_KEEP:N_KEEP + drop]
        job.shifted = True
        self.stats.context_shifts += 1
        return True

    def _finish(self, job: Job, reason: FinishReason, now: float, text: str = "", tokens: list[int] | None = None,
                logprobs: list[TokenLogprob] | None = None) -> None:
        if reason != "cancelled" and job.out is not None:
            text += job.out.flush()
        job.next_token = None
        usage = record_finish(self.stats, job, now)
        emit(job, Delta(text=text, tokens=tokens or [], logprobs=logprobs or [], finish_reason=reason,
                              usage=usage, stop_word=job.out.stop_word if job.out is not None else None))
        self._close_job(job, reason)

    def _close_job(self, job: Job, reason: str = "error") -> None:
        job.done = True
        for chunk in job.media.values():  # native image data, whether or not it was decoded
            try:
                chunk.close()
            except Exception:
                log.exception("freeing an image chunk failed")
        job.media = {}
        self.stats.finish(reason, time.perf_counter() - job.arrived)
        if job.slot is not None:
            slot = self.slots[job.slot]
            slot.job, slot.last_used = None, time.perf_counter()
            if not job.prompt_cache or job.shifted:  # leave nothing reusable behind
                self.backend.seq_rm(slot.id, -1, -1)
                slot.cache = []
                if job.speculation is not None and job.speculation.drafter is not None:  # nor in a draft's cache
                    job.speculation.drafter.forget(slot.id)
            elif reason in ("stop", "length") and len(job.group) == 1:
                self.tiers.checkpoint(job, slot)
            if reason in ("stop", "length"):
                remember(self.ngram, job)  # later requests that repeat this one draft from it
        try:
            job.sampler.close()
        except Exception:
            log.exception("closing a sampler failed")

    def _fail_all(self, make_error: Callable[[], BaseException]) -> None:
        """Fail every held job, each with its own exception instance (one shared instance
        would gather every request's traceback and context)."""
        jobs = [s.job for s in self.slots if s.job is not None] + self.line.take_all()
        for job in jobs:
            job.next_token = None
            emit(job, Delta(error=make_error()))
            self._close_job(job)

    def _reset_cache(self) -> None:
        for s in self.slots:
            s.cache = []
        self.tiers.forget_host()  # states computed with the old weights (or a failed step)
        try:
            self.backend.clear()
        except Exception:
            log.exception("clearing the KV cache failed")
