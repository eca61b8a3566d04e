"""inferd command line: `inferd serve`, `inferd models`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

from inferd import __version__
from inferd.config import Settings, load_settings
from inferd.errors import ConfigError
from inferd.models import ModelSpec

log = logging.getLogger("inferd")



def _add_settings_flags(p: argparse.ArgumentParser) -> None:
    """Flags shared by `serve` and `models`. Unset flags stay None so env/config can apply."""
    a = p.add_argument
    a("--config", help="TOML or JSON config file (env: INFERD_CONFIG)")
    a("--models-dir", help="Antfly-layout models folder (default ~/.inferd/models)")
    a("--ml-dir", help="tabular predictors folder (default ~/.inferd/ml)")
    a("--model", action="append", dest="models", metavar="[KIND:]NAME=PATH",
      help="serve one more model by hand; repeatable")
    a("--mmproj", action="append", dest="mmproj", metavar="FILE",
      help="vision projector (mmproj GGUF) of a --model generator, paired in order; repeatable")
    a("--mmproj-n-threads", type=int, metavar="N", help="threads of the vision projector (default: --threads)")
    a("--no-mmproj-gpu", action="store_const", const=False, dest="mmproj_gpu",
      help="keep the vision projector on the CPU when layers are offloaded (a CPU build has no GPU)")
    a("--ignore-images-without-projector", action="store_const", const=True, default=None,
      help="image parts sent to a generator without a vision projector are dropped with a warning "
           "(openai-server's behaviour) instead of a 400")
    a("--no-builtins", action="store_const", const=False, dest="builtins",
      help="serve only configured models (plus the `fixed` chunker)")


def _serve_flags(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--host", help="bind address (default 127.0.0.1)")
    a("--port", type=int, help="port (default 8080)")
    a("--api-key", help="require Authorization: Bearer KEY on every route but health")
    a("--allow-insecure-public-bind", action="store_const", const=True, default=None,
      help="allow a non-loopback --host (inferd has no TLS)")
    a("--keep-alive", help="unload a model this long after its last use (300, 5m, 1h; -1 = never)")
    a("--max-loaded-models", type=int)
    a("--max-memory", help="memory budget of loaded models (8GiB, 512MiB, bytes; 0 = none; "
                           "default 75%% of RAM): idle models are evicted LRU, a model that cannot fit is a 507")
    a("--max-concurrent-requests", type=int, help="inference requests running at once (default 64; 0 = unbounded)")
    a("--max-queued-requests", type=int)
    a("--queue-timeout", help="longest wait in the admission queue before a 503")
    a("--max-body-bytes", help="largest request body (32MiB, bytes; default 32 MiB); a /v1/files upload may "
                               "also carry --max-file-bytes plus its form fields")
    a("--max-audio-bytes", help="largest audio upload (25MiB, bytes; default 25 MiB); larger is a 413")
    a("--max-audio-seconds", type=float, help="longest audio per request (default 1800); longer is a 413")
    a("--realtime-max-sessions", type=int, help="open /v1/realtime transcription sessions at once (default 64)")
    a("--realtime-max-buffer-seconds", type=float,
      help="audio a realtime session buffers, the longest turn (default 60); more is an error event")
    a("--parallel", type=int, help="generation slots per model (default 4)")
    a("--threads", type=int, help="CPU threads per runtime (default: all cores)")
    a("-c", "--ctx-size", type=int, help="tokens of context per generator slot (default: manifest or model)")
    a("--cache-dtype", choices=["f16", "bf16", "q8_0", "q4_0", "f32"],
      help="generator KV cache type (default f16; a manifest's cache_dtype wins)")
    a("--cache-ram", type=int, metavar="MIB",
      help="host-RAM prompt cache per generator in MiB: evicted sequences' KV states, LRU (default 0: off)")
    a("--reasoning-budget", type=int, metavar="N",
      help="tokens of thinking a request may use when it names no budget or effort; at N the end-of-thinking "
           "marker is written and the answer follows (default -1: unbounded; 0: no thinking)")
    a("--n-gpu-layers", type=int, help="layers llama.cpp offloads to a GPU (default 0; a CPU build has none)")
    a("--max-batch-tokens", type=int, help="token budget of one encoder batch")
    a("--max-batch-size", type=int, help="inputs per encoder forward pass (default 512; 1 disables batching)")
    a("--no-prefer-quantized", action="store_const", const=False, dest="prefer_quantized",
      help="load model.onnx even when a quantized variant (model_quantized.onnx, *_int8) is present")
    a("--data-dir", help="server data (uploaded files) (default ~/.inferd)")
    a("--max-media-bytes", help="encoded image bytes per request (default and cap 100 MiB; 0 = no media)")
    a("--max-read-batch-bytes", help="encoded image bytes of one /ai/v1/read request (default 256 MiB)")
    a("--max-image-dimension", type=int, help="largest image edge in pixels (default 16384)")
    a("--allow-remote-media", action="store_const", const=True, default=None,
      help="fetch http(s) image URLs named in requests (off: data stays on the host)")
    a("--allow-private-media-urls", action="store_const", const=True, default=None,
      help="with --allow-remote-media, also fetch from loopback and private addresses")
    a("--media-fetch-timeout", type=float, help="seconds a remote image fetch may take (default 10)")
    a("--cors-origins", help="comma-separated web origins allowed besides loopback pages "
      "(https://app.example, https://app.example:* for any port, * for all)")
    a("--allowed-hosts", help="comma-separated Host names accepted besides IPs, localhost and --host "
      "(DNS-rebinding protection; * for all)")
    a("--max-batch-inputs", type=int, help="inputs per request: embeddings, rerank documents, "
      "extract and rewrite inputs (default 2048)")
    a("--prep-threads", type=int, help="threads preparing requests: templates, tokenizing, grammars (default 4)")
    a("--max-file-bytes", help="largest uploaded file (1MiB, bytes; default 32 MiB)")
    a("--max-files-total-bytes", help="quota of all uploaded files (default 1 GiB)")
    a("--ray", metavar="ADDRESS", help="deploy on an existing Ray cluster (host:port) instead of serving "
                                       "here; needs --cluster-config and inferd[cluster]")
    a("--cluster-config", metavar="FILE", help="models, replicas and placement for --ray (TOML or JSON)")
    a("--log-level", choices=["debug", "info", "warning", "error"])
    a("--log-format", choices=["text", "json"])
    a("--responses-max-count", type=int, help="stored /v1/responses kept at most; the oldest go first (default 10000)")
    a("--responses-max-age", help="drop stored /v1/responses older than this (30d, 12h, seconds; 0 = never; "
                                  "default 30d)")
    a("--drain-timeout", help="on SIGTERM or POST /admin/drain, wait this long for in-flight requests (default 30s)")
    a("--cache-dir", help="disk prompt cache: KV states of prompt prefixes kept in this folder across "
      "restarts (off unless given)")
    a("--cache-disk-size", help="bytes the --cache-dir folder may hold, all models together, least recently "
      "used out first (default 2GiB)")
    a("--slot-save-path", help="folder for POST /slots/{id}?action=save|restore files (off unless given)")
    a("--slots-show-prompts", action="store_const", const=True, default=None,
      help="GET /slots shows the text cached in each slot")
    a("--otlp-endpoint", help="export OpenTelemetry traces over OTLP/HTTP to this collector (needs inferd[otel])")


def _settings(ns: argparse.Namespace) -> Settings:
    fields = set(Settings.model_fields)
    overrides = {k: v for k, v in vars(ns).items() if k in fields}
    return load_settings(overrides, ns.config)


def cmd_serve(ns: argparse.Namespace) -> int:
    import uvicorn

    from inferd.api.app import create_app
    from inferd.logs import setup_logging
    from inferd.api.server import DrainingServer
    from inferd.registry.pull.cli import prepare_serve
    from inferd.service import InferenceService

    settings = _settings(ns)
    settings.check_bind()
    setup_logging(settings.log_level, settings.log_format)
    if (rc := prepare_serve(ns, settings)) is not None:  # --hf / --gguf / --print-path
        return rc
    if getattr(ns, "ray", None):
        from inferd.cluster.cli import serve_on_ray

        return serve_on_ray(ns.ray, ns.cluster_config, settings)
    from inferd.doctor import summary_lines

    for line in summary_lines(settings):  # the machine half of `inferd doctor`: CPU, builds, memory, disk
        log.info("  %s", line)
    service = InferenceService.from_settings(settings)
    log.info("inferd %s serving %d models on http://%s:%d", __version__, len(service.registry.specs),
             settings.host, settings.port)
    for spec in service.registry.specs.values():
        log.info("  %-12s %s (%s, %s)", spec.kind.value, spec.name, spec.format, spec.source)
    app = create_app(settings, service)
    from inferd.api.http_protocol import http_protocol

    # The first SIGTERM drains (observability/drain.py) before uvicorn's own shutdown runs.
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=5, http=http_protocol())
    server = DrainingServer(config, service.observer.drain)
    server.run()
    return 0 if server.started else 1


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

    settings = _settings(ns)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferd", description="local inference server")
    parser.add_argument("--version", action="version", version=f"inferd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the HTTP server")
    _add_settings_flags(serve)
    _serve_flags(serve)
    from inferd.registry.pull.cli import add_serve_flags

    add_serve_flags(serve)
    serve.set_defaults(func=cmd_serve)
    models = sub.add_parser("models", help="list the models the server would serve")
    _add_settings_flags(models)
    models.set_defaults(func=cmd_models)
    from inferd.doctor import register as doctor  # light: imports runtimes only when run

    doctor(sub, _add_settings_flags, _settings)
    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Subcommands contributed by other modules: fn(subparsers) -> None. Imported here, not
    at the top, so `inferd serve` pays for none of them."""
    from inferd.cluster.cli import register as cluster  # light: Ray is imported only when used
    from inferd.registry.pull.cli import register as pull  # light: huggingface_hub is imported on use
    from inferd.registry.pull.cli import register_aliases as serve_aliases  # openai-server's `local`, `hf-model`
    from inferd.runtimes.tabular.importers.cli import register as ml_import  # light: no ML imports

    return [ml_import, cluster, pull, serve_aliases]


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except ConfigError as e:
        print(f"inferd: {e}", file=sys.stderr)
        return 2
