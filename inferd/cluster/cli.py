"""`inferd serve --ray ADDRESS --cluster-config FILE` and `inferd cluster deploy|status|delete`."""

from __future__ import annotations

import argparse
import json
import signal
import threading

from inferd.config import Settings
from inferd.errors import ConfigError


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
    from inferd.cli import _settings
    from inferd.cluster import config, deploy

    settings = _settings(ns)
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


def register(sub: argparse._SubParsersAction) -> None:
    from inferd.cli import _add_settings_flags, _serve_flags

    p = sub.add_parser("cluster", help="run inferd on a Ray cluster (deploy, status, delete)")
    verbs = p.add_subparsers(dest="verb", required=True)
    d = verbs.add_parser("deploy", help="deploy the models of --cluster-config and return")
    _add_settings_flags(d)
    _serve_flags(d)
    d.set_defaults(func=_deploy)
    s = verbs.add_parser("status", help="replicas per model: node, state, load")
    s.add_argument("--ray", required=True, metavar="ADDRESS")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_status)
    x = verbs.add_parser("delete", help="remove inferd's application from the cluster")
    x.add_argument("--ray", required=True, metavar="ADDRESS")
    x.set_defaults(func=_delete)
