"""The command-line API: a subcommand is a Command (name, help, its own arguments, what it runs,
and which option scopes its settings flags come from). Modules contribute Commands (a COMMANDS
tuple); inferd/cli.py assembles them. A command module imports this, never inferd.cli, so
`cli -> cluster.cli / registry.pull.cli -> cli_api` has no way back."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from inferd.config import Settings, load_settings
from inferd.settings_table import add_flags


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    run: Callable[[argparse.Namespace], int] | None = None
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    scopes: tuple[str, ...] = ()            # settings flags from these option scopes (config.py); () none
    subcommands: tuple[Command, ...] = ()   # `inferd cluster deploy`: verbs, each a Command
    verb_dest: str = "verb"


_INSTALLED: dict[str, Command] = {}


def install(sub: argparse._SubParsersAction, commands: Iterable[Command], prefix: str = "") -> None:
    """Each command as a subparser of `sub`: settings flags first, then its own arguments."""
    for cmd in commands:
        p = sub.add_parser(cmd.name, help=cmd.help)
        if cmd.scopes:
            add_flags(p, cmd.scopes)
        if cmd.add_arguments is not None:
            cmd.add_arguments(p)
        if cmd.subcommands:
            install(p.add_subparsers(dest=cmd.verb_dest, required=True), cmd.subcommands, f"{prefix}{cmd.name} ")
        else:
            if cmd.run is None:
                raise TypeError(f"command {prefix}{cmd.name} has neither run nor subcommands")
            p.set_defaults(func=cmd.run)
        _INSTALLED[prefix + cmd.name] = cmd


def run(name: str, ns: argparse.Namespace) -> int:
    """Run an installed command by name: how an alias runs the command it stands for."""
    cmd = _INSTALLED[name]
    assert cmd.run is not None
    return cmd.run(ns)


def settings_from(ns: argparse.Namespace) -> Settings:
    """Settings from parsed flags (absent ones are None) over env, the config file and defaults."""
    fields = set(Settings.model_fields)
    overrides: dict[str, Any] = {k: v for k, v in vars(ns).items() if k in fields}
    return load_settings(overrides, getattr(ns, "config", None))
