"""inferd on Ray Serve: one deployment per model (or config group), each replica running
inferd's own service and engine for that model; an ingress deployment whose ASGI app is
inferd's own app plus the forwarder. Imported only by `inferd serve --ray` / `inferd cluster`
(needs the optional extra `inferd[cluster]`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import ray
from ray import serve

from inferd.cluster.bridge import ForwardedRequest, run_asgi
from inferd.cluster.config import ClusterConfig, ModelDeployment
from inferd.observability.observer import engine_of

log = logging.getLogger("inferd.cluster")

BOARD = "inferd-load"       # the named actor replicas report their load to
NAMESPACE = "inferd"
REPORT_EVERY_S = 0.5
STALE_AFTER_S = 5.0         # a replica that stopped reporting (died) leaves /load


@ray.remote(num_cpus=0)
class LoadBoard:
    """Replicas' latest load, for the ingress's /load and /metrics: cheap to read, never a
    request to a busy replica."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def report(self, replica: str, row: dict[str, Any]) -> None:
        self.rows[replica] = {**row, "at": time.time()}

    def forget(self, replica: str) -> None:
        self.rows.pop(replica, None)

    def snapshot(self) -> list[dict[str, Any]]:
        now = time.time()
        return [{"replica": r, **row} for r, row in sorted(self.rows.items()) if now - row["at"] < STALE_AFTER_S]


def replica_settings(d: ModelDeployment) -> Any:
    from inferd.config import load_settings

    # The ingress checked auth, Host and Origin; a replica is reached only through Serve.
    return load_settings({"models": [d.model_arg], "builtins": False, "models_dir": "/nonexistent",
                          "ml_dir": "/nonexistent", "parallel": d.parallel, "threads": d.threads,
                          "keep_alive": -1, "max_concurrent_requests": max(1, d.parallel * 2),
                          "max_queued_requests": max(1, d.max_queued_requests), "cors_origins": []})


class ModelReplica:
    """One replica: inferd's service + app for one model, loaded at start, serving forwarded
    requests through the ASGI bridge (the same routes and envelopes as a single server)."""

    async def __init__(self, deployment: ModelDeployment) -> None:
        from inferd.api.app import create_app
        from inferd.service import InferenceService

        self.deployment = deployment
        settings = replica_settings(deployment)
        self.service = InferenceService.from_settings(settings)
        self.app = create_app(settings, self.service)
        await self.service.start()
        async with self.service.registry.use(deployment.name):  # load now: the first request pays nothing
            pass
        ctx = serve.get_replica_context()
        self.replica_id = ctx.replica_id.unique_id
        self.node_id = ray.get_runtime_context().get_node_id()
        self.board = ray.get_actor(BOARD, namespace=NAMESPACE)
        self._reporter = asyncio.get_running_loop().create_task(self._report_forever())

    async def handle(self, req: ForwardedRequest) -> AsyncIterator[Any]:
        async for item in run_asgi(self.app, req):
            if isinstance(item, tuple):  # the response start: say which replica answered
                kind, status, headers = item
                item = (kind, status, [*headers, ("x-inferd-replica", self.replica_id),
                                       ("x-inferd-node", self.node_id)])
            yield item

    def stats(self) -> dict[str, Any]:
        running = waiting = slots = 0
        for entry in self.service.registry.loaded.values():
            engine = engine_of(entry.spec, entry.model)
            if engine is not None:
                running += engine.active
                waiting += engine.queued
                slots += len(engine.slots)
        in_flight = self.service.admission.in_flight
        return {"model": self.deployment.name, "node": self.node_id, "running": running or in_flight,
                "waiting": waiting + self.service.admission.queued, "slots": slots or self.deployment.parallel,
                "slots_free": max(0, (slots or self.deployment.parallel) - (running or in_flight))}

    async def _report_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.board.report.remote(self.replica_id, self.stats())
            await asyncio.sleep(REPORT_EVERY_S)

    async def check_health(self) -> None:
        """Serve restarts a replica whose engine worker died."""
        for entry in self.service.registry.loaded.values():
            engine = engine_of(entry.spec, entry.model)
            if engine is not None and engine.dead is not None:
                raise RuntimeError(f"generation worker died: {engine.dead}")

    async def record_routing_stats(self) -> dict[str, Any]:
        return self.stats()

    async def __del__(self) -> None:  # graceful replica shutdown
        with contextlib.suppress(Exception):
            self._reporter.cancel()
            await self.service.close()


class ServeTarget:
    """A deployment handle as the forwarder's Target."""

    def __init__(self, name: str, handle: Any):
        self.name, self.handle = name, handle.options(stream=True)

    def open(self, req: ForwardedRequest) -> Any:
        return _ServeStream(self.handle.handle.remote(req))


class _ServeStream:
    def __init__(self, gen: Any):
        self.gen = gen

    def __aiter__(self) -> "_ServeStream":
        return self

    async def __anext__(self) -> Any:
        return await self.gen.__anext__()

    async def aclose(self) -> None:
        self.gen.cancel()  # Serve propagates the cancellation into the replica


@serve.ingress()
class Ingress:
    """inferd's own app as Serve's HTTP ingress, with the cluster models forwarded."""

    def __init__(self, config: ClusterConfig, ingress_settings: dict[str, Any], *handles: Any) -> None:
        self.config, self.ingress_settings = config, ingress_settings
        self.targets = {d.name: ServeTarget(d.name, h) for d, h in zip(config.models, handles)}
        self.board = ray.get_actor(BOARD, namespace=NAMESPACE)

    def __serve_build_asgi_app__(self) -> Any:
        from inferd.cluster.ingress import build_ingress_app

        return build_ingress_app(self.config, self.ingress_settings, self.targets, self._snapshot)

    async def _snapshot(self) -> list[dict[str, Any]]:
        return await self.board.snapshot.remote()


def deployments(config: ClusterConfig, ingress_settings: dict[str, Any]) -> Any:
    """The Serve application: a bound ingress over one bound deployment per model."""
    from ray.serve.config import AutoscalingConfig, RequestRouterConfig

    bound = []
    for d in config.models:
        actor: dict[str, Any] = {"num_cpus": d.num_cpus}
        if d.memory:
            actor["memory"] = d.memory
        if d.resources:
            actor["resources"] = dict(d.resources)
        opts: dict[str, Any] = {
            "name": d.deployment_name, "ray_actor_options": actor,
            # A replica takes as many requests as it has slots; beyond that the caller queues up
            # to max_queued_requests, then Serve refuses (BackPressureError -> 503).
            "max_ongoing_requests": d.parallel, "max_queued_requests": d.max_queued_requests,
            "request_router_config": RequestRouterConfig(
                request_router_class="inferd.cluster.router:AffinityRouter",
                request_routing_stats_period_s=1.0, request_routing_stats_timeout_s=2.0),
            "graceful_shutdown_timeout_s": 5, "health_check_period_s": 2, "health_check_timeout_s": 10}
        if d.autoscaling:
            lo, hi = d.autoscaling
            opts["autoscaling_config"] = AutoscalingConfig(min_replicas=lo, max_replicas=hi,
                                                           target_ongoing_requests=max(1, d.parallel // 2))
        else:
            opts["num_replicas"] = d.num_replicas
        if d.max_replicas_per_node:
            opts["max_replicas_per_node"] = d.max_replicas_per_node
        bound.append(serve.deployment(ModelReplica).options(**opts).bind(d))
    # The ingress lives on the head node, beside Serve's HTTP proxy (location HeadOnly): a worker
    # node that dies takes its model replicas with it, never the endpoint clients talk to.
    ingress = serve.deployment(Ingress).options(
        name="inferd-ingress", num_replicas=1, max_ongoing_requests=10_000,
        ray_actor_options={"num_cpus": 0.25, "resources": {"node:__internal_head__": 0.001}})
    return ingress.bind(config, ingress_settings, *bound)


def ensure_board() -> Any:
    return LoadBoard.options(name=BOARD, namespace=NAMESPACE, lifetime="detached", get_if_exists=True).remote()
