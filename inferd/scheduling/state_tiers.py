"""The prompt-cache tiers behind a generator's slots, as the engine (generation.py) uses them:
host RAM (`--cache-ram`, state_cache.py) and disk (`--cache-dir`, disk_cache.py).

When a slot is about to take a new prompt, the sequence it holds is saved to host RAM first
(if the new prompt keeps little of it); then the best saved state (RAM first, then disk) is
restored into the slot when it covers more of the prompt than any slot could lend. A
finished (or just prefilled) prompt's state is offered to the disk tier. Both tiers hold
base-weight states only: their entries are not keyed by a request's LoRA adapter set.

Every call runs on the engine's worker thread. The engine's stats object is passed in per
call because the observer replaces it once the model is loaded."""

from __future__ import annotations

import functools
import logging
from typing import Any, cast

from inferd.observability.stats import GenStats
from inferd.scheduling.disk_cache import DiskCache
from inferd.scheduling.jobs import Backend, Job, Slot, snap_to_media
from inferd.scheduling.state_cache import HostCache

log = logging.getLogger("inferd.generation")


class StateTiers:
    def __init__(self, backend: Backend, host_cache_bytes: int = 0, disk: DiskCache | None = None):
        self.backend = backend
        # saving a sequence needs llama_state_seq_get_data: a backend without it gets no RAM tier
        self.host = HostCache(host_cache_bytes) if host_cache_bytes > 0 and hasattr(backend, "seq_state") else None
        self.disk = disk  # states that outlive the process

    @property
    def checkpoints(self) -> bool:
        """Does the disk tier want a prompt's state as soon as its prefill ends (SWA models)?"""
        return self.disk is not None and self.disk.checkpoints

    def restore(self, job: Job, own: Slot, limit: int, keep: int, donor_keep: int, stats: GenStats) -> tuple[bool, int]:
        """Before `own` takes `job` (whose slot-held prefix is `keep` tokens, a lender's
        `donor_keep`, at most `limit`): save own's sequence to RAM, then load the best saved
        state that beats both. -> (restored, tokens of the prompt the slot holds now); a failed
        load leaves the slot empty (0 tokens)."""
        if not job.prompt_cache or job.adapters or own.adapters:  # base weights only
            return False, keep
        prompt = job.prompt
        if self.host is not None:
            self._save(own, keep)
            n, hit = self.host.best(prompt, limit, getattr(self.backend, "reuse_floor", None))
            n = snap_to_media(job, n)  # never inside an image span
            if hit is not None and n > donor_keep:
                if self._load(own, hit, n, stats):
                    own.cache = prompt[:n]
                    return True, n
                keep, own.cache = 0, []  # the slot was emptied for the failed restore
        if self.disk is not None and not job.media:
            n = self.disk.restore(self.backend, own.id, prompt, limit, job.cache_key, max(keep, donor_keep))
            if n < 0:
                stats.prompt_cache_refused += 1
            if n:  # loaded (n > 0) or the slot emptied by a failed load (-1)
                keep = max(n, 0)
                own.cache = prompt[:keep]
                stats.disk_cache_restored_tokens += keep
                return True, keep
        return False, keep

    def _save(self, slot: Slot, keep: int) -> None:
        """Save the slot's sequence before a new prompt overwrites most of it."""
        if len(slot.cache) - keep >= HostCache.MIN_TOKENS:
            try:
                assert self.host is not None  # only called with a host cache
                self.host.put(list(slot.cache), cast(Any, self.backend).seq_state(slot.id))
            except Exception:
                log.exception("saving a sequence to the host cache failed")

    def _load(self, slot: Slot, key: tuple[int, ...], n: int, stats: GenStats) -> bool:
        """Load a saved state into `slot`, cut to its first `n` tokens."""
        assert self.host is not None  # only called with a host cache
        data = self.host.take(key)
        self.backend.seq_rm(slot.id, -1, -1)
        if not cast(Any, self.backend).set_seq_state(slot.id, data):
            log.warning("restoring a sequence from the host cache failed; prefilling it")
            return False
        self.backend.seq_rm(slot.id, n, -1)
        stats.host_cache_restored_tokens += n
        return True

    def checkpoint(self, job: Job, slot: Slot) -> None:
        """Offer the job's sequence as it stands to the disk tier (written off this thread)."""
        if self.disk is not None and job.prompt_cache and not job.media and not job.shifted and not job.adapters:
            self.disk.offer(slot.cache, job.cache_key, functools.partial(cast(Any, self.backend).seq_state, slot.id))

    def reusable(self, slot: Slot, keep: int) -> bool:
        """Does the sequence, cut to `keep` tokens, still hold the cells its next position
        attends to? A live slot of a several-slot context does (it keeps every cell:
        swa_full), but a one-slot context keeps only ~n_swa + n_batch cells in its
        sliding-window layers, and a state restored from RAM or disk holds them only near its
        end, so cut further back either cannot be resumed (llama-server's "forcing full prompt
        re-processing"): then the prompt is prefilled whole, counted in prompt_cache_refused."""
        check = getattr(self.backend, "reusable", None)
        return check is None or check(slot.id, keep)

    def forget_host(self) -> None:
        """Drop the RAM tier's states: computed with the old weights (or by a failed step)."""
        if self.host is not None:
            self.host = HostCache(self.host.capacity)

    def refresh_disk(self) -> None:
        """After a LoRA switch the model has another identity: the disk tier looks again."""
        if self.disk is not None:
            self.disk.refresh()

    def close(self) -> None:
        if self.disk is not None:
            self.disk.close()
