"""Deploy inferd on an existing Ray cluster (`inferd serve --ray`, `inferd cluster ...`)."""

from __future__ import annotations

import logging
import time
from typing import Any

from inferd.cluster.config import ClusterConfig
from inferd.config import Settings
from inferd.errors import ConfigError

log = logging.getLogger("inferd.cluster")
APP = "inferd"


def ingress_settings(settings: Settings) -> dict[str, Any]:
    """What the ingress's own app needs of the operator's settings: the address clients use
    (for the Host check), the API key, browser origins and request limits."""
    keep = {"host", "port", "api_key", "cors_origins", "allowed_hosts", "max_body_bytes", "queue_timeout",
            "log_level", "log_format"}
    return {k: v for k, v in settings.model_dump().items() if k in keep}


def connect(address: str) -> None:
    try:
        import ray
    except ImportError as e:
        raise ConfigError("scale-out needs Ray Serve: pip install 'inferd[cluster]'") from e
    ray.init(address=address, namespace="inferd", logging_level="ERROR", log_to_driver=False)


def deploy(address: str, config: ClusterConfig, settings: Settings, timeout_s: float = 600) -> str:
    """Deploy (or update) the inferd application; returns once every replica is running."""
    connect(address)
    from ray import serve

    from inferd.cluster.ingress import cluster_specs
    from inferd.cluster.serve_app import deployments, ensure_board

    cluster_specs(config)  # every model file must be readable here too (the ingress's catalog)
    ensure_board()
    serve.start(http_options={"host": settings.host, "port": settings.port, "location": "HeadOnly"})
    serve.run(deployments(config, ingress_settings(settings)), name=APP, route_prefix="/", blocking=False)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        app = serve.status().applications.get(APP)
        if app is not None and str(app.status) in ("RUNNING", "ApplicationStatus.RUNNING"):
            return f"http://{settings.host}:{settings.port}"
        if app is not None and "DEPLOY_FAILED" in str(app.status):
            raise ConfigError(f"deploying inferd on Ray failed: {app.message}")
        time.sleep(0.5)
    raise ConfigError(f"inferd's deployments were not running after {timeout_s:.0f}s")


def status(address: str) -> dict[str, Any]:
    """Replicas per model with node, state and load."""
    connect(address)
    import ray
    from ray import serve

    from inferd.cluster.serve_app import BOARD, NAMESPACE

    app = serve.status().applications.get(APP)
    if app is None:
        return {"status": "NOT_DEPLOYED", "models": {}}
    try:
        rows = ray.get(ray.get_actor(BOARD, namespace=NAMESPACE).snapshot.remote(), timeout=10)
    except Exception:  # the board is optional for status
        rows = []
    out: dict[str, Any] = {"status": str(app.status).rsplit(".", 1)[-1], "models": {}}
    for name, dep in app.deployments.items():
        out["models"][name] = {"status": str(dep.status).rsplit(".", 1)[-1],
                               "replicas": {str(k).rsplit(".", 1)[-1]: v for k, v in dep.replica_states.items()},
                               "load": [r for r in rows if f"model-{r['model']}" == name or r["model"] == name]}
    return out


def delete(address: str) -> None:
    connect(address)
    from ray import serve

    serve.delete(APP)
