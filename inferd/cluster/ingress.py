"""The ingress's ASGI app: inferd's own app (create_app: the same routes, middleware, Host/
Origin/API-key checks, error envelopes) over a service that knows every cluster model's spec
but loads none, with the forwarder inside its middleware sending model requests to the
models' Serve deployments, and the cluster's own /load and /metrics aggregated from the
replicas' reports."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from inferd.cluster.config import ClusterConfig
from inferd.cluster.forward import ModelForwarder, Target
from inferd.errors import NotImplementedYet
from inferd.models import ModelKind, ModelSpec
from inferd.observability.prom import esc

Snapshot = Callable[[], Awaitable[list[dict[str, Any]]]]


def cluster_specs(config: ClusterConfig) -> list[ModelSpec]:
    from inferd.registry.discovery import make_spec

    return [make_spec(d.name, d.path, "cluster", d.kind) for d in config.models]


def _refuse(spec: ModelSpec) -> Callable[[ModelSpec], Any]:
    raise NotImplementedYet(f"model '{spec.name}' is served by cluster replicas, not by the ingress")


def load_totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """GET /load across replicas: per model {running, waiting, slots, slots_free, replicas}
    and the totals (vLLM's /load, llama-server's /slots without prompt contents)."""
    models: dict[str, dict[str, Any]] = {}
    for r in rows:
        m = models.setdefault(r["model"], {"running": 0, "waiting": 0, "slots": 0, "slots_free": 0, "replicas": []})
        for k in ("running", "waiting", "slots", "slots_free"):
            m[k] += int(r.get(k, 0))
        m["replicas"].append({"replica": r["replica"], "node": r.get("node"), "running": r.get("running", 0),
                              "waiting": r.get("waiting", 0), "slots": r.get("slots", 0)})
    totals = {k: sum(m[k] for m in models.values()) for k in ("running", "waiting", "slots", "slots_free")}
    return {"models": models, **totals, "replicas": len(rows)}


def replica_metrics(rows: list[dict[str, Any]]) -> str:
    lines = []
    for name in ("running", "waiting", "slots", "slots_free"):
        lines.append(f"# TYPE inferd_replica_{name} gauge")
        for r in rows:
            lines.append(f'inferd_replica_{name}{{model="{esc(r["model"])}",replica="{esc(r["replica"])}",'
                         f'node="{esc(r.get("node") or "")}"}} {int(r.get(name, 0))}')
    return "\n".join(lines) + "\n"


def build_ingress_app(config: ClusterConfig, ingress_settings: dict[str, Any], targets: dict[str, Target],
                      snapshot: Snapshot) -> Any:
    from inferd.api.app import create_app
    from inferd.config import load_settings
    from inferd.registry.registry import Registry
    from inferd.scheduling.admission import Admission
    from inferd.service import InferenceService

    settings = load_settings({"builtins": False, "models_dir": "/nonexistent", "ml_dir": "/nonexistent",
                              **ingress_settings})
    registry = Registry.build(cluster_specs(config), _refuse)
    # Capacity is the replicas' (Serve's max_ongoing/max_queued): the ingress admits freely.
    admission = Admission(10**9, 10**9, settings.queue_timeout)
    service = InferenceService(settings, registry, admission)
    gens = [d.name for d in config.models if registry.specs[d.name].kind is ModelKind.GENERATOR]

    def local(scope: dict[str, Any], receive: Any, send: Any) -> Awaitable[None] | None:
        if scope["method"] == "GET" and scope["path"] == "/load":
            return _json(send, snapshot, lambda rows: json.dumps(load_totals(rows)).encode(), "application/json")
        if scope["method"] == "GET" and scope["path"] == "/metrics":
            async def metrics() -> None:
                text = service.metrics.render(service.gauges()) + replica_metrics(await snapshot())
                await _send(send, 200, text.encode(), "text/plain; version=0.0.4")
            return metrics()
        return None

    return create_app(settings, service, inner_middleware=[
        (ModelForwarder, {"targets": targets, "default_generator": gens[0] if len(gens) == 1 else None,
                          "local": local})])


async def _json(send: Any, snapshot: Snapshot, render: Callable[[list[dict[str, Any]]], bytes], ctype: str) -> None:
    await _send(send, 200, render(await snapshot()), ctype)


async def _send(send: Any, status: int, body: bytes, ctype: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
