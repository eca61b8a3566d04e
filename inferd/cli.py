"""inferd command line: `inferd serve`, `inferd models`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from inferd import __version__
from inferd.cli_api import Command, install, settings_from
from inferd.config import COMMON, LOCAL, MODEL, SERVE
from inferd.errors import ConfigError
from inferd.models import ModelKind, ModelSpec

log = logging.getLogger("inferd")


def cmd_serve(ns: argparse.Namespace) -> int:
    from inferd.logs import setup_logging
    from inferd.registry.pull.cli import prepare_serve

    settings = settings_from(ns)
    settings.check_bind()
    setup_logging(settings.log_level, settings.log_format)
    if (rc := prepare_serve(ns, settings)) is not None:  # --hf / --gguf / --print-path
        return rc
    if getattr(ns, "ray", None):
        from inferd.cluster.cli import serve_on_ray

        return serve_on_ray(ns.ray, ns.cluster_config, settings)
    # Preloads begin before most of inferd is imported: the native load (llama.cpp's vocabulary
    # alone is ~0.5 s for gemma 3) runs beside those imports on the second core (issue 31,
    # docs/benchmarks.md "Cold start"). The built-in chat model's file is known before
    # discovery, so its parse starts first; the registry's preload then takes it.
    early = prefetch_builtin_generator(settings)
    from inferd.service import InferenceService

    service = InferenceService.from_settings(settings)
    names = preload_names(settings.preload, service.registry.specs.values())
    if early and early not in names:  # a models dir brought generators: auto names none
        from inferd.runtimes.llama_cpp.model import drop_prefetched

        drop_prefetched()
    service.registry.preload(names, between=lambda: wait_idle(lambda: service.admission.in_flight > 0,
                                                              quiet_s=0.5, at_most_s=10))
    import uvicorn

    from inferd.api.app import create_app
    from inferd.api.server import DrainingServer

    log.info("inferd %s serving %d models on http://%s:%d", __version__, len(service.registry.specs),
             settings.host, settings.port)
    for spec in service.registry.specs.values():
        log.info("  %-12s %s (%s, %s)", spec.kind.value, spec.name, spec.format, spec.source)
    app = create_app(settings, service)
    from inferd.api.http_protocol import http_protocol

    # The first SIGTERM drains (observability/drain.py) before uvicorn's own shutdown runs.
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=5, http=http_protocol())
    # The machine half of `inferd doctor` (CPU, builds, memory, disk) once the socket listens and
    # no request is in flight: it imports the native runtimes to name their builds (about 0.2 s
    # of CPU), which would otherwise hold back the start, or the first request's model load on
    # a small machine (issue 31).
    def summary() -> None:
        wait_idle(lambda: service.admission.in_flight > 0)
        log_machine(settings)

    server = DrainingServer(config, service.observer.drain, after_start=[summary])
    server.run()
    return 0 if server.started else 1


BUILTIN_CHAT = "gemma-3-270m"  # what `--preload auto` loads first (the benchmarks' model)


def prefetch_builtin_generator(settings: Any) -> str | None:
    """`--preload auto` with the built-ins: begin llama.cpp's parse of the built-in chat model's
    GGUF on a thread now (assembled from its package and self-checked there first). -> its
    name, or None when not begun. Discovery may still find that auto names nothing (the
    caller then drops it)."""
    if settings.preload != ["auto"] or not settings.builtins or settings.models:
        return None
    from inferd.runtimes.llama_cpp import model, selfcheck

    def locate() -> Path:
        from inferd.registry.builtins import gemma_270m_path

        path = gemma_270m_path()
        selfcheck.require(path, settings.n_threads or os.cpu_count() or 1, BUILTIN_CHAT)
        return path

    model.prefetch(locate, settings.n_gpu_layers)
    return BUILTIN_CHAT


def preload_names(asked: list[str], specs: Iterable[ModelSpec]) -> list[str]:
    """--preload's names: `auto` is the built-in generators (gemma-3-270m first, the model the
    benchmarks start) unless another generator is configured, whose owner names it; `none`
    is nothing; any other word is a model name (checked by the registry)."""
    specs = list(specs)
    if asked in (["none"], [""], []):
        return []
    if asked == ["auto"]:
        gens = [s for s in specs if s.kind is ModelKind.GENERATOR]
        if any(s.source != "builtin" for s in gens):
            return []
        return [s.name for s in sorted(gens, key=lambda s: s.name != BUILTIN_CHAT)]
    if "auto" in asked or "none" in asked:
        raise ConfigError("--preload: 'auto' and 'none' stand alone, not in a list of names")
    return asked


def wait_idle(busy: Callable[[], bool], quiet_s: float = 1.0, at_most_s: float = 30.0) -> None:
    """Return once `busy()` has been false for `quiet_s` seconds, or after `at_most_s`."""
    start = quiet = time.monotonic()
    while (now := time.monotonic()) - start < at_most_s:
        if busy():
            quiet = now
        elif now - quiet >= quiet_s:
            return
        time.sleep(0.1)


def log_machine(settings: Any) -> None:
    from inferd.doctor import summary_lines

    for line in summary_lines(settings):
        log.info("  %s", line)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _no_loads(spec: ModelSpec) -> Callable[[ModelSpec], Any]:
    raise ConfigError(f"`inferd models` does not load models ({spec.name})")


def cmd_models(ns: argparse.Namespace) -> int:
    from inferd.registry.registry import Registry
    from inferd.service import discover_all

    settings = settings_from(ns)
    found = discover_all(settings)
    Registry.build(found.specs, _no_loads)  # duplicate names are an error here too
    rows = [(s.name, s.kind.value, s.format, _human(s.size_bytes) if s.size_bytes else "-",
             s.source + (f" ({s.manifest['origin']})" if s.manifest.get("origin") else "")
             + (f" {s.path}" if s.path else "")
             + (f" ({s.manifest['unsupported']})" if s.manifest.get("unsupported") else "")) for s in found.specs]
    head = ("NAME", "KIND", "FORMAT", "SIZE", "SOURCE")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
    for p in found.problems:
        print(f"warning: {p}", file=sys.stderr)
    return 0


SERVE_COMMAND = Command("serve", "start the HTTP server", run=cmd_serve, scopes=(COMMON, SERVE, LOCAL, MODEL))
MODELS_COMMAND = Command("models", "list the models the server would serve", run=cmd_models, scopes=(COMMON,))


def commands() -> list[Command]:
    """Every subcommand, in help order. The contributing modules are imported here, not at the
    top, and each is light: Ray, huggingface_hub and the ML libraries load only when used."""
    from inferd.cluster.cli import COMMANDS as cluster
    from inferd.doctor import COMMANDS as doctor
    from inferd.registry.pull.cli import COMMANDS as pull  # `pull`, and openai-server's `local`, `hf-model`
    from inferd.ml_cli import COMMANDS as ml_import

    return [SERVE_COMMAND, MODELS_COMMAND, *doctor, *ml_import, *cluster, *pull]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferd", description="local inference server")
    parser.add_argument("--version", action="version", version=f"inferd {__version__}")
    install(parser.add_subparsers(dest="command", required=True), commands())
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except ConfigError as e:
        print(f"inferd: {e}", file=sys.stderr)
        return 2
