"""`inferd serve --ray ADDRESS --cluster-config FILE` and `inferd cluster deploy|status|delete`."""

from __future__ import annotations

import argparse
import json
import signal
import threading

from inferd.cli_api import Command, settings_from
from inferd.config import COMMON, SERVE, Settings
from inferd.errors import ConfigError
from inferd.settings_table import OPTIONS, add_option


def serve_on_ray(address: str, config_file: str | None, settings: Settings) -> int:
    """Deploy, print the endpoint, and keep the application up until SIGINT/SIGTERM (then the
    application is deleted from the cluster, as stopping a single server would stop it)."""
    from inferd.cluster import config, deploy

    if not config_file:
        raise ConfigError("--ray needs --cluster-config FILE (the models to deploy and their replicas)")
    url = deploy.deploy(address, config.load(config_file), settings)
    print(f"inferd is serving on Ray at {url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    deploy.delete(address)
    return 0


def _deploy(ns: argparse.Namespace) -> int:
    from inferd.cluster import config, deploy

    settings = settings_from(ns)
    settings.check_bind()
    print(deploy.deploy(ns.ray, config.load(ns.cluster_config), settings))
    return 0


def _status(ns: argparse.Namespace) -> int:
    from inferd.cluster import deploy

    st = deploy.status(ns.ray)
    if ns.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"application: {st['status']}")
    for name, m in st["models"].items():
        states = ", ".join(f"{k}={v}" for k, v in m["replicas"].items()) or "no replicas"
        print(f"  {name}: {m['status']} ({states})")
        for r in m.get("load", []):
            print(f"    replica {r['replica']} on node {str(r.get('node'))[:12]}: running {r['running']}, "
                  f"waiting {r['waiting']}, slots {r['slots_free']}/{r['slots']} free")
    return 0


def _delete(ns: argparse.Namespace) -> int:
    from inferd.cluster import deploy

    deploy.delete(ns.ray)
    return 0


def _ray_argument(p: argparse.ArgumentParser) -> None:
    add_option(p, OPTIONS["ray"], required=True)  # status and delete need the cluster; serve does not


def _status_arguments(p: argparse.ArgumentParser) -> None:
    _ray_argument(p)
    p.add_argument("--json", action="store_true")


COMMANDS = (Command("cluster", "run inferd on a Ray cluster (deploy, status, delete)", subcommands=(
    Command("deploy", "deploy the models of --cluster-config and return", run=_deploy, scopes=(COMMON, SERVE)),
    Command("status", "replicas per model: node, state, load", run=_status, add_arguments=_status_arguments),
    Command("delete", "remove inferd's application from the cluster", run=_delete, add_arguments=_ray_argument),
)),)
