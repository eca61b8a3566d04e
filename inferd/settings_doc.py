"""The configuration reference, generated from the option table (inferd/settings_table.py):

    python -m inferd.settings_doc             # print the Markdown tables of every option
    python -m inferd.settings_doc --write     # rewrite them in docs/configuration.md
    python -m inferd.settings_doc --check     # exit 1 when docs/configuration.md is stale

Only the region between the two markers is written; the prose around it is the docs' own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferd.settings_table import GROUPS, OPTIONS, Option

BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(o: Option) -> str:
    flags = ", ".join(f"`{f}{' ' + o.metavar if o.metavar else ''}`" for f in o.flags)
    env = f"`{o.env}`" if o.env else "-"
    key = f"`{o.name}`" if o.setting else "-"
    default = o.default_text() if o.shown is not None else f"`{o.default_text()}`"
    notes = [o.help]
    if o.choices:
        notes.append("one of " + ", ".join(f"`{c}`" for c in o.choices))
    bounds = [f"at least {o.ge:g}" if o.ge else "", f"more than {o.gt:g}" if o.gt is not None else "",
              f"at most {o.le:g}" if o.le is not None else ""]
    if any(bounds):
        notes.append(", ".join(b for b in bounds if b))
    if o.repeat:
        notes.append("env and file: a comma-separated list or a JSON list")
    return f"| {flags} | {env} | {key} | {_cell(default)} | {_cell('; '.join(notes))} |"


def table() -> str:
    """Every option, one table per section, in the order of GROUPS."""
    parts = []
    for group, title in GROUPS.items():
        rows = [_row(o) for o in OPTIONS.values() if o.group == group]
        if rows:
            parts.append(f"### {title}\n\n| Flag | Environment | Config key | Default | Description |\n"
                         "|---|---|---|---|---|\n" + "\n".join(rows))
    return "\n\n".join(parts) + "\n"


def rewrite(text: str) -> str:
    """`text` with the region between the markers replaced by the current tables."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} region")
    return text[: start + len(BEGIN)] + "\n\n" + table() + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m inferd.settings_doc", description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", nargs="?", const=str(DOC), metavar="FILE", help=f"rewrite FILE (default {DOC})")
    mode.add_argument("--check", nargs="?", const=str(DOC), metavar="FILE", help="exit 1 when FILE is stale")
    ns = p.parse_args(argv)
    if not (ns.write or ns.check):
        sys.stdout.write(table())
        return 0
    path = Path(ns.write or ns.check)
    old = path.read_text()
    new = rewrite(old)
    if ns.check:
        if new != old:
            print(f"{path} is stale: run python -m inferd.settings_doc --write", file=sys.stderr)
            return 1
        return 0
    if new != old:
        path.write_text(new)
        print(f"rewrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
