"""The cluster config file (TOML or JSON): which models run as Serve deployments, how many
replicas each, and what a replica needs. Pure parsing and validation; no Ray here.

    [[models]]
    name = "chat"                 # served name (the `model` clients send)
    kind = "generator"            # optional: inferred from the files, as for --model
    path = "/models/chat.gguf"    # the same path must exist on every node (or shared storage)
    num_replicas = 2              # or: autoscaling = {min = 1, max = 4}
    num_cpus = 1.0                # per replica
    memory = "2GiB"               # per replica (Ray's memory resource)
    resources = {node_b = 1}      # custom resources, for placement
    max_replicas_per_node = 1
    parallel = 4                  # generator slots per replica (= Serve's max_ongoing_requests)
    threads = 1                   # CPU threads of the replica's runtime
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from inferd.config import default_of, parse_size
from inferd.errors import ConfigError
from inferd.kinds import KINDS, parse_kind
from inferd.models import ModelKind
from inferd.settings_table import OPTIONS

_KEYS = {"name", "kind", "path", "num_replicas", "autoscaling", "num_cpus", "memory", "resources",
         "max_replicas_per_node", "parallel", "threads", "max_queued_requests"}


@dataclass(frozen=True)
class ModelDeployment:
    name: str
    path: Path
    kind: ModelKind | None = None
    num_replicas: int = 1
    autoscaling: tuple[int, int] | None = None   # (min, max) replicas
    num_cpus: float = 1.0
    memory: int = 0                               # bytes; 0: not reserved
    resources: dict[str, float] = field(default_factory=dict)
    max_replicas_per_node: int | None = None
    parallel: int = default_of("parallel")        # as a single server's --parallel
    threads: int = 1                              # per replica: a node runs several (not --threads' all cores)
    max_queued_requests: int = 64                 # per deployment handle, beyond the replicas' slots

    @property
    def deployment_name(self) -> str:
        """A Serve deployment name for the served name (which may hold '/' and ':')."""
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in self.name)
        return f"model-{safe}"

    @property
    def model_arg(self) -> str:
        """The replica's `--model` entry."""
        return f"{self.kind.value + ':' if self.kind else ''}{self.name}={self.path}"


@dataclass(frozen=True)
class ClusterConfig:
    models: list[ModelDeployment]


def _kind(value: Any, where: str) -> ModelKind | None:
    if value is None:
        return None
    w = str(value).strip().lower()
    kind = parse_kind(w)
    if kind is None:
        raise ConfigError(f"{where}: unknown kind {value!r} (one of {', '.join(KINDS)})")
    return kind


_DEFAULTS = {f.name: f.default for f in fields(ModelDeployment)}


def _num(m: dict[str, Any], key: str, default: Any, cast: type, where: str, least: float = 0) -> Any:
    """A numeric entry, or a ConfigError naming it (never a bare ValueError traceback)."""
    value = m.get(key, default)
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        n = cast(value)
        if n != n or n < least:  # NaN, or below the least sensible value
            raise ValueError(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {key} must be a number >= {least:g} (got {value!r})") from None
    return n


def _setting(m: dict[str, Any], key: str, where: str) -> int:
    """An entry that is also a server setting (parallel, threads): the setting's range applies."""
    n = _num(m, key, _DEFAULTS[key], int, where, OPTIONS[key].ge or 0)
    try:
        return int(OPTIONS[key].check(n))
    except ValueError as e:
        raise ConfigError(f"{where}: {key} {e}") from None


def parse(data: dict[str, Any], source: str = "cluster config") -> ClusterConfig:
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        raise ConfigError(f"{source}: 'models' must be a non-empty list of model entries")
    out, seen = [], set()
    for i, m in enumerate(models):
        where = f"{source}: models[{i}]"
        if not isinstance(m, dict):
            raise ConfigError(f"{where} must be a table / object")
        unknown = set(m) - _KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
        if not m.get("name") or not m.get("path"):
            raise ConfigError(f"{where}: 'name' and 'path' are required")
        name = str(m["name"])
        if name in seen:
            raise ConfigError(f"{where}: duplicate model name {name!r}")
        seen.add(name)
        auto = m.get("autoscaling")
        if auto is not None:
            if not isinstance(auto, dict) or not {"min", "max"} <= set(auto):
                raise ConfigError(f"{where}: autoscaling must be {{min, max}}")
            lo, hi = _num(auto, "min", 0, int, f"{where}: autoscaling"), _num(auto, "max", 1, int, f"{where}: autoscaling")
            if not 0 <= lo <= hi or hi < 1:
                raise ConfigError(f"{where}: autoscaling needs 0 <= min <= max and max >= 1")
            if "num_replicas" in m:
                raise ConfigError(f"{where}: give num_replicas or autoscaling, not both")
        replicas = _num(m, "num_replicas", _DEFAULTS["num_replicas"], int, where, 1)
        resources = m.get("resources") or {}
        if not isinstance(resources, dict):
            raise ConfigError(f"{where}: resources must be a table of name = amount")
        try:
            memory = parse_size(m.get("memory", 0))
        except ValueError as e:
            raise ConfigError(f"{where}: memory: {e}") from e
        out.append(ModelDeployment(
            name=name, path=Path(str(m["path"])).expanduser(), kind=_kind(m.get("kind"), where),
            num_replicas=replicas, autoscaling=(lo, hi) if auto is not None else None,
            num_cpus=_num(m, "num_cpus", _DEFAULTS["num_cpus"], float, where), memory=memory,
            resources={str(k): _num(resources, k, 0, float, f"{where}: resources") for k in resources},
            max_replicas_per_node=_num(m, "max_replicas_per_node", 1, int, where, 1)
            if m.get("max_replicas_per_node") else None,
            parallel=_setting(m, "parallel", where), threads=_setting(m, "threads", where),
            max_queued_requests=_num(m, "max_queued_requests", _DEFAULTS["max_queued_requests"], int, where)))
    return ClusterConfig(out)


def load(path: str | Path) -> ClusterConfig:
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read cluster config {p}: {e}") from e
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {e}") from e
    return parse(data, str(p))
