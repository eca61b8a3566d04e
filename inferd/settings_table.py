"""The table of every option, read from the one declaration of each: the fields of Settings
(inferd/config.py) and the few command-line switches that are not settings (--config, --ray,
--hf, ...), declared below. The argparse flags (inferd/cli_api.py), the configuration docs
(inferd/settings_doc.py) and tests/test_settings.py are built from it; nothing else restates a
name, a default or a range."""

from __future__ import annotations

import argparse
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from inferd.config import (COMMON, DURATION, LOCAL, ML, MODEL, SERVE, SIZE, Settings, flags_of, parse_duration,
                           parse_size)

# Doc sections and argparse help groups, in the order the docs show them.
GROUPS = {
    "models": "Models",
    "server": "Server and security",
    "loading": "Loading and memory",
    "admission": "Requests and limits",
    "generation": "Generation (llama.cpp)",
    "encoders": "Encoders (ONNX)",
    "media": "Images",
    "storage": "Files and stored responses",
    "pulls": "Getting models",
    "observability": "Logs, traces and shutdown",
    "cluster": "Ray cluster",
}


@dataclass(frozen=True)
class Option:
    name: str                       # Settings field = config-file key = argparse dest
    kind: str                       # int float size duration bool str path list choice secret
    default: Any
    help: str
    group: str
    scopes: tuple[str, ...]         # which commands take the flag (config.py: COMMON, SERVE, ...)
    flags: tuple[str, ...]
    env: str | None                 # INFERD_<NAME>; None: the command line only
    choices: tuple[str, ...] = ()
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    metavar: str | None = None
    repeat: bool = False            # the flag may be given more than once (a list)
    shown: str | None = None        # the default as the docs say it, when it is computed
    setting: bool = True            # False: a command-line switch, not a Settings field

    def check(self, value: Any) -> Any:
        """`value` if it is in range, else ValueError saying the range."""
        if isinstance(value, float) and math.isnan(value):
            raise ValueError("not a number: nan")
        if self.ge is not None and value < self.ge:
            raise ValueError(f"must be at least {self.ge:g} (got {value!r})")
        if self.gt is not None and value <= self.gt:
            raise ValueError(f"must be more than {self.gt:g} (got {value!r})")
        if self.le is not None and value > self.le:
            raise ValueError(f"must be at most {self.le:g} (got {value!r})")
        return value

    def parse(self, raw: str) -> Any:
        """A flag's value, read and range-checked as argparse's `type`: a bad one is argparse's
        error naming the flag (exit 2), before any settings are built."""
        readers: dict[str, Any] = {"int": int, "float": float, "size": parse_size, "duration": parse_duration}
        try:
            value = readers[self.kind](raw)
        except ValueError as e:
            what = {"int": "an integer", "float": "a number"}.get(self.kind)
            raise argparse.ArgumentTypeError(f"not {what}: {raw!r}" if what else str(e)) from None
        try:
            return self.check(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    def argparse_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"dest": self.name, "help": self.help.replace("%", "%%")}
        if self.kind == "bool" and self.setting:
            # absent, a setting's switch leaves None, so env and file still apply
            return {**kw, "action": "store_const", "const": not self.default, "default": None}
        if self.kind == "bool":
            return {**kw, "action": "store_true"}
        if self.repeat:
            kw["action"] = "append"
        if self.choices:
            kw["choices"] = list(self.choices)
        if self.kind in ("int", "float", "size", "duration"):
            kw["type"] = self.parse
        if self.metavar:
            kw["metavar"] = self.metavar
        kw["help"] += f" (default: {self.default_text()})".replace("%", "%%")
        if self.env and not self.setting:
            kw["help"] += f" (env: {self.env})"
        return kw

    def default_text(self) -> str:
        if self.shown is not None:
            return self.shown
        d = self.default
        if d is None:
            return "none"
        if isinstance(d, bool):
            return str(d).lower()
        if self.kind == "size":
            return size_text(d)
        if self.kind == "duration":
            return duration_text(d)
        return str(d)


def size_text(n: int) -> str:
    """8589934592 -> "8GiB": the largest unit that divides it, as --max-memory reads it back."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def duration_text(secs: float) -> str:
    if secs == math.inf:
        return "-1 (never)"
    if secs and secs == int(secs):
        for unit, scale in (("d", 86400), ("h", 3600), ("m", 60)):
            if secs % scale == 0:
                return f"{int(secs) // scale}{unit}"
    return f"{secs:g}s"


def _kind(f: FieldInfo) -> tuple[str, tuple[str, ...]]:
    """What a Settings field holds, from its type: the kind and, for a Literal, its choices."""
    ann: Any = f.annotation
    meta = list(f.metadata)
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        ann = next(a for a in typing.get_args(ann) if a is not type(None))
    if typing.get_origin(ann) is Annotated:
        meta += list(ann.__metadata__)
        ann = typing.get_args(ann)[0]
    if any(m is SIZE for m in meta):
        return "size", ()
    if any(m is DURATION for m in meta):
        return "duration", ()
    if typing.get_origin(ann) is Literal:
        return "choice", tuple(str(c) for c in typing.get_args(ann))
    if typing.get_origin(ann) is list:
        return "list", ()
    named = {bool: "bool", int: "int", float: "float", str: "str", Path: "path", SecretStr: "secret"}
    if ann in named:
        return named[ann], ()
    raise TypeError(f"setting of an unknown type: {ann!r}")


def _bound(f: FieldInfo, cls: type) -> float | None:
    found = [m for m in f.metadata if isinstance(m, cls)]
    return float(getattr(found[0], cls.__name__.lower())) if found else None


def _from_field(name: str, f: FieldInfo) -> Option:
    extra: dict[str, Any] = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
    if "group" not in extra:
        raise TypeError(f"setting {name!r} is declared without config.option(): it needs help, a group, scopes")
    kind, choices = _kind(f)
    return Option(
        name=name, kind=kind, default=f.get_default(call_default_factory=True), help=f.description or "", group=str(extra["group"]), scopes=tuple(extra["scopes"]),
        flags=flags_of(name), env=f"INFERD_{name.upper()}", choices=choices,
        ge=_bound(f, annotated_types.Ge), gt=_bound(f, annotated_types.Gt), le=_bound(f, annotated_types.Le),
        metavar=extra.get("metavar"), repeat=bool(extra.get("repeat")), shown=extra.get("shown"))


# The command-line switches that are not settings: what a command does, not how the server runs.
COMMAND_LINE_ONLY = (
    Option(name="config", kind="path", default=None, help="TOML or JSON config file: any setting, by its key",
           group="models", scopes=(COMMON, ML), flags=("--config",), env="INFERD_CONFIG", metavar="FILE",
           setting=False),
    Option(name="ray", kind="str", default=None, help="deploy on an existing Ray cluster (host:port) instead of "
           "serving here; needs --cluster-config and inferd[cluster]", group="cluster", scopes=(SERVE,),
           flags=("--ray",), env=None, metavar="ADDRESS", setting=False),
    Option(name="cluster_config", kind="path", default=None, help="models, replicas and placement for --ray "
           "(TOML or JSON)", group="cluster", scopes=(SERVE,), flags=("--cluster-config",), env=None,
           metavar="FILE", setting=False),
    Option(name="hf", kind="str", default=None, help="download this Hub model first (if not here yet), then serve",
           group="pulls", scopes=(MODEL,), flags=("--hf",), env=None, metavar="REPO[:QUANT]", setting=False),
    Option(name="gguf", kind="path", default=None, help="serve this local GGUF file as a generator named after it "
           "(an mmproj-*.gguf beside it is its vision projector, unless --mmproj)", group="pulls",
           scopes=(MODEL,), flags=("--gguf",), env=None, metavar="PATH", setting=False),
    Option(name="print_path", kind="bool", default=False, help="print the model path and exit (for scripts)",
           group="pulls", scopes=(LOCAL,), flags=("--print-path",), env=None, setting=False),
)

OPTIONS: dict[str, Option] = {
    **{name: _from_field(name, f) for name, f in Settings.model_fields.items()},
    **{o.name: o for o in COMMAND_LINE_ONLY},
}


def in_scopes(scopes: tuple[str, ...]) -> list[Option]:
    """The options whose flags a command taking `scopes` has, in doc order."""
    return [o for g in GROUPS for o in OPTIONS.values() if o.group == g and set(o.scopes) & set(scopes)]


def add_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, o: Option, **override: Any) -> None:
    """One option's flag (`override`: e.g. required=True where a command cannot do without it)."""
    p.add_argument(*o.flags, **{**o.argparse_kwargs(), **override})


def add_flags(p: argparse.ArgumentParser, scopes: tuple[str, ...]) -> None:
    """Every flag of the options in `scopes`, in help groups by section."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for o in in_scopes(scopes):
        if o.group not in groups:
            groups[o.group] = p.add_argument_group(GROUPS[o.group].lower())
        add_option(groups[o.group], o)
