"""GGUF repos: group the files into quantizations (with their shards), and pick one.

A repo holds e.g. `BF16/model-BF16-00001-of-00017.gguf ...`, `Q4_K_M/model-00001-of-00006.gguf ...`
and `model-Q8_0.gguf`: a group is the files of one folder and one quantization label (the
folder's name, else the label in the file name), shards included. `mmproj-*.gguf` are
vision projectors, never a group; one travels with the chosen group."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

_SHARD = re.compile(r"-(\d{5})-of-(\d{5})$")
_LABEL = re.compile(r"(?i)(?:^|[-_.])((?:UD-)?(?:I?Q\d(?:_[0-9A-Z]+)*|TQ\d_\d|BF16|F16|F32|FP16|FP32|MXFP4(?:_MOE)?))(?=$|[-_.])")

# Non-interactive pick order (the openai-server's: Q4_K_M > Q4_K_S > Q4_0 > Q5_K_M > ... > Q2_K):
# the 4-bit K-quants first (best size/quality trade-off on CPU), then 5-bit, then larger, then
# the smaller 3- and 2-bit ones, then anything unknown, then unquantized weights.
PREFERENCE = ["Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q5_K_S", "Q5_0", "Q4_K_L", "IQ4_XS", "IQ4_NL", "Q4_1",
              "Q5_1", "Q6_K", "Q8_0", "Q3_K_L", "Q3_K_M", "Q3_K_S", "IQ3_M", "IQ3_XS", "IQ3_XXS", "Q2_K_L", "Q2_K"]
_LAST = ["F16", "BF16", "F32"]


@dataclass(frozen=True)
class GFile:
    path: str
    size: int


@dataclass
class Group:
    label: str
    files: list[GFile] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def shards(self) -> int:
        return len(self.files)


def _stem(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") else name


def label_of(path: str) -> str:
    """The quantization label of a GGUF file: its folder's name when it sits in one (shard
    folders are named after the quant), else the label in its name, else its name."""
    if "/" in path:
        return path.rsplit("/", 2)[-2]
    stem = _SHARD.sub("", _stem(path))
    found = _LABEL.findall(stem)
    return found[-1].upper() if found else stem


def is_mmproj(path: str) -> bool:
    return path.rsplit("/", 1)[-1].lower().startswith("mmproj")


def group_files(files: Sequence[GFile]) -> list[Group]:
    """GGUF weight files grouped by (folder, label), in the repo's listing order."""
    groups: dict[tuple[str, str], Group] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf") or is_mmproj(f.path):
            continue
        folder = f.path.rsplit("/", 1)[0] if "/" in f.path else ""
        label = label_of(f.path)
        groups.setdefault((folder, label.upper()), Group(label)).files.append(f)
    for g in groups.values():
        g.files.sort(key=lambda f: f.path)
    return list(groups.values())


def rank(label: str) -> tuple[int, int]:
    """Sort key of a label in the non-interactive order (smaller first)."""
    base = label.upper().removeprefix("UD-")
    if base in PREFERENCE:
        return (0, PREFERENCE.index(base) * 2 + (base != label.upper()))
    if base in _LAST:
        return (2, _LAST.index(base))
    return (1, 0)


def auto_pick(groups: Sequence[Group]) -> Group:
    return min(groups, key=lambda g: (rank(g.label), g.label))


def select(groups: Sequence[Group], selector: str) -> Group | None:
    """`selector` names a label (case-insensitive) or a file (exact path or file name; a shard
    brings its whole group)."""
    s = selector.strip()
    if s.lower().endswith(".gguf"):
        for g in groups:
            if any(f.path == s or f.path.rsplit("/", 1)[-1] == s for f in g.files):
                return g
        return None
    exact = [g for g in groups if g.label.upper() == s.upper()]
    if exact:
        return exact[0]
    loose = [g for g in groups if g.label.upper().removeprefix("UD-") == s.upper().removeprefix("UD-")]
    return loose[0] if loose else None


def pick_mmproj(files: Sequence[GFile], group: Group) -> GFile | None:
    """The projector for `group`: one in its folder if any, else at the top; F16 first."""
    folder = group.files[0].path.rsplit("/", 1)[0] if "/" in group.files[0].path else ""
    cands = [f for f in files if is_mmproj(f.path) and f.path.lower().endswith(".gguf")]
    same = [f for f in cands if (f.path.rsplit("/", 1)[0] if "/" in f.path else "") == folder]
    cands = same or [f for f in cands if "/" not in f.path] or cands
    pref = ["F16", "BF16", "F32", "Q8_0"]
    return min(cands, key=lambda f: next((i for i, p in enumerate(pref) if p in f.path.upper()), 9), default=None)


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def describe(groups: Sequence[Group]) -> list[str]:
    auto = auto_pick(groups)
    out = []
    for i, g in enumerate(groups, 1):
        shards = f"{g.shards} shard{'s' if g.shards != 1 else ''}"
        mark = "  <- auto-picked in non-TTY mode" if g is auto else ""
        out.append(f"  {i:>2})  {g.label}  [{shards}, {human(g.size)}]{mark}")
    return out


def prompt_pick(groups: Sequence[Group], repo: str, stdin: TextIO | None = None,
                out: TextIO | None = None) -> Group:
    """The interactive picker: numbered groups, asks until it gets a valid number."""
    stdin, out = stdin or sys.stdin, out or sys.stderr
    out.write(f"Available models in {repo}:\n" + "\n".join(describe(groups)) + "\n")
    while True:
        out.write(f"Select a model [1-{len(groups)}]: ")
        out.flush()
        line = stdin.readline()
        if not line:
            raise KeyboardInterrupt("no selection made")
        try:
            n = int(line.strip())
        except ValueError:
            n = 0
        if 1 <= n <= len(groups):
            return groups[n - 1]
        out.write(f"Please type a number from 1 to {len(groups)}.\n")


Chooser = Callable[[Sequence[Group], str], Group]
