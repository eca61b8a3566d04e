"""Replica choice for inferd's model deployments (a Serve RequestRouter): a request with an
affinity key (its prompt_cache_key, or a hash of its prompt's start) prefers the replica that
rendezvous hashing assigns to that key, where its prompt prefix is cached; the rest, and any
request whose preferred replica is full, go by power of two choices on queue length."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica


def rendezvous(key: str, replica_ids: list[str]) -> list[str]:
    """Replica ids ordered by highest random weight for `key`: stable for a key, and only the
    keys of a replica that left move when the set changes."""
    def weight(rid: str) -> int:
        return int.from_bytes(hashlib.blake2b(f"{key}|{rid}".encode(), digest_size=8).digest(), "big")

    return sorted(replica_ids, key=weight, reverse=True)


def affinity_of(pending: PendingRequest | None) -> str | None:
    if pending is None or not pending.args:
        return None
    return getattr(pending.args[0], "affinity", None)


class AffinityRouter(FIFOMixin, RequestRouter):
    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        by_id: dict[str, Any] = {r.replica_id.unique_id: r for r in candidate_replicas}
        key = affinity_of(pending_request)
        ranks: list[list[RunningReplica]] = []
        rest = list(candidate_replicas)
        if key:
            first = by_id[rendezvous(key, list(by_id))[0]]
            ranks.append([first])
            rest = [r for r in candidate_replicas if r is not first]
        if rest:
            ranks.append(random.sample(rest, min(2, len(rest))))  # power of two choices by queue length
        return ranks
