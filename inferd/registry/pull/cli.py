"""`inferd pull REPO[:QUANT|:FILE]`, and `inferd serve --hf / --gguf / --print-path`.

In a terminal, a GGUF repo with several quantizations and no `:QUANT` shows the numbered
groups and asks; otherwise (piped, CI) the non-interactive order picks one. Progress bars
(tqdm, on stderr) show each file and the total; `--print-path` prints only the model's
folder on stdout, for scripts."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferd.cli_api import Command, run, settings_from
from inferd.config import COMMON, LOCAL, PULL, SERVE
from inferd.errors import InferdError

log = logging.getLogger("inferd")


def _chooser(interactive: bool):
    from inferd.registry.pull import quants

    def choose(groups: Sequence[quants.Group], repo: str) -> quants.Group:
        if len(groups) == 1:
            return groups[0]
        if interactive:
            return quants.prompt_pick(groups, repo)
        g = quants.auto_pick(groups)
        print(f"auto-picked {g.label} [{g.shards} shard{'s' if g.shards != 1 else ''}] of {len(groups)} "
              f"quantizations (not a terminal; name one with {repo}:QUANT)", file=sys.stderr)
        return g

    return choose


class _Bars:
    """tqdm bars: one per file as it downloads, plus the total of the pull."""

    def __init__(self, quiet: bool):
        from tqdm import tqdm

        self.tqdm, self.quiet = tqdm, quiet
        self.bars: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.n = 0
        self.total: Any = None
        self.done: dict[str, int] = {}
        self.names: dict[str, str] = {}

    def _plan(self, plan: dict[str, Any]) -> None:
        files = plan["files"]
        label = f"{plan['label']}  " if plan.get("label") else ""
        print(f"Downloading: {plan['repo']}  {label}[{len(files)} file{'s' if len(files) != 1 else ''}]",
              file=sys.stderr)
        for i, f in enumerate(files, 1):
            self.names[f["digest"]] = f"{i}/{len(files)}: {f['path'].rsplit('/', 1)[-1]}"
        if len(files) > 1:
            self.total = self.tqdm(total=plan["total"], unit="B", unit_scale=True, unit_divisor=1024,
                                   desc="total", file=sys.stderr, position=0, leave=True, dynamic_ncols=True)

    def __call__(self, e: dict[str, Any]) -> None:
        if self.quiet:
            return
        with self.lock:
            if "plan" in e:
                return self._plan(e["plan"])
            if "digest" not in e:
                if e["status"] == "pulling manifest":
                    print("pulling manifest", file=sys.stderr)
                elif e["status"] == "success":
                    self.close()
                return
            bar = self.bars.get(e["digest"])
            if bar is None:
                self.n += 1
                name = self.names.get(e["digest"]) or f"{self.n}: {e.get('file') or e['digest']}"
                bar = self.bars[e["digest"]] = self.tqdm(
                    total=e.get("total") or None, unit="B", unit_scale=True, unit_divisor=1024,
                    desc=name[-48:], file=sys.stderr, leave=True, dynamic_ncols=True)
            now = int(e.get("completed") or 0)
            bar.update(max(0, now - bar.n))
            if self.total is not None:
                self.total.update(max(0, now - self.done.get(e["digest"], 0)))
                self.done[e["digest"]] = now

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()
        if self.total is not None:
            self.total.close()
            self.total = None


def pull(name: str, models_dir: Path, settings: Any, *, kind_word: str | None = None, print_path: bool = False,
         revision: str | None = None) -> Path:
    from inferd.registry.discovery import parse_kind
    from inferd.registry.pull.puller import Puller

    kind = None
    if kind_word:
        kind = parse_kind(kind_word)
        if kind is None:
            raise InferdError(f"unknown --kind {kind_word!r}")
    puller = Puller(models_dir, reserve_bytes=settings.download_reserve_bytes,
                    prefer_quantized=settings.prefer_quantized, ollama_registry=settings.ollama_registry)
    bars = _Bars(quiet=False)
    interactive = sys.stdin.isatty()
    try:
        if "/" in name or name.lower().startswith(("hf.co/", "huggingface.co/")):
            got = puller.pull_hub(name, kind=kind, choose=_chooser(interactive), on_event=bars, revision=revision)
        else:
            got = puller.pull_ollama(name, on_event=bars)
    finally:
        bars.close()
    if print_path:
        print(got.path)
    else:
        print(f"pulled {got.name} ({got.kind.value}) into {got.path}", file=sys.stderr)
    return got.path


def cmd_pull(ns: argparse.Namespace) -> int:
    settings = settings_from(ns)
    try:
        pull(ns.ref, settings.models_dir, settings, kind_word=ns.kind, print_path=ns.print_path, revision=ns.revision)
    except InferdError as e:
        print(f"inferd pull: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninferd pull: interrupted (run it again to resume)", file=sys.stderr)
        return 130
    return 0


def _pull_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("ref", metavar="REPO[:QUANT|:FILE]",
                   help="org/repo (a GGUF or ONNX repo), org/repo:Q4_K_M, org/repo:file.gguf, or an Ollama name")
    p.add_argument("--kind", help="what the model is, when the repo does not say (embedder, reranker, ...)")
    p.add_argument("--revision", help="a branch, tag or commit of the repo (default main)")
    p.add_argument("--print-path", action="store_true", help="print the model folder on stdout (for scripts)")


def _local_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("gguf", metavar="PATH", help="the GGUF file")


def _hf_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo", metavar="REPO", help="org/repo on the Hugging Face Hub")
    p.add_argument("quant", metavar="QUANT|FILE", nargs="?",
                   help="a quantization (Q4_K_M) or an exact .gguf file name; omitted: asked in a terminal, "
                        "else the best one")


def _serve_alias(ns: argparse.Namespace) -> int:
    if getattr(ns, "repo", None):
        ns.hf = f"{ns.repo}:{ns.quant}" if ns.quant else ns.repo
    return run("serve", ns)


# openai-server's command forms are aliases of `inferd serve`, with every serve flag but --hf and
# --gguf (their positional arguments say that): `inferd local PATH` is `serve --gguf PATH` and
# `inferd hf-model REPO [QUANT|FILE]` is `serve --hf REPO[:QUANT]`.
_ALIAS_SCOPES = (COMMON, SERVE, LOCAL)
COMMANDS = (
    Command("pull", "download a model from the Hugging Face Hub (or an Ollama registry)", run=cmd_pull,
            add_arguments=_pull_arguments, scopes=(COMMON, PULL)),
    Command("local", "serve a local GGUF file (as `serve --gguf PATH`)", run=_serve_alias,
            add_arguments=_local_arguments, scopes=_ALIAS_SCOPES),
    Command("hf-model", "download a Hub GGUF repo if needed and serve it (as `serve --hf`)", run=_serve_alias,
            add_arguments=_hf_model_arguments, scopes=_ALIAS_SCOPES),
)


def find_local(models_dir: Path, name: str) -> Path | None:
    """A model pulled before for this Hub reference (any quantization when none is named)."""
    from inferd.registry.discovery import scan_models_dir, Discovery
    from inferd.registry.pull.names import hub_served_name, parse_hub

    try:
        ref = parse_hub(name)
    except ValueError:
        return None
    found = Discovery()
    scan_models_dir(models_dir, found)
    want = hub_served_name(ref.repo, ref.selector)
    for spec in found.specs:
        src = spec.manifest.get("source") or {}
        if spec.name.lower() == want.lower() or (ref.selector is None and src.get("repo") == ref.repo):
            return spec.path
    return None


def prepare_serve(ns: argparse.Namespace, settings: Any) -> int | None:
    """Handle --hf / --gguf before the server starts; an int is the exit code (--print-path).
    `--hf` uses a copy pulled before when there is one (no network), else pulls it."""
    path: Path | None = None
    if getattr(ns, "hf", None):
        path = find_local(settings.models_dir, ns.hf)
        if path is None:
            try:
                path = pull(ns.hf, settings.models_dir, settings, print_path=False)
            except InferdError as e:
                print(f"inferd serve --hf: {e.message}", file=sys.stderr)
                return 1
    if getattr(ns, "gguf", None):
        path = Path(ns.gguf).expanduser().resolve()
        if not path.is_file():
            print(f"inferd serve --gguf: no such file {path}", file=sys.stderr)
            return 2
        stem = path.name[: -len(".gguf")] if path.name.endswith(".gguf") else path.stem
        if not settings.mmproj and not settings.models:
            # openai-server: without --mmproj, a projector in the model's folder is used
            beside = sorted(p for p in path.parent.glob("mmproj*.gguf") if p != path)
            if beside:
                log.info("using the vision projector %s beside %s", beside[0], path.name)
                settings.mmproj.append(str(beside[0]))
        settings.models.append(f"generator:{stem.split('-00001-of-')[0]}={path}")
    if getattr(ns, "print_path", False):
        if path is None:
            print("inferd serve: --print-path needs --hf or --gguf", file=sys.stderr)
            return 2
        print(path)
        return 0
    return None
