"""Settings: CLI flags > INFERD_* environment variables > config file (TOML or JSON) > defaults."""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import tomllib
from pathlib import Path
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

import inferd.defaults as D
from inferd.defaults import all_cores
from inferd.errors import ConfigError

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: Any) -> float:
    """Seconds from 300, "300", "5m", "1h", "250ms" (Ollama's keep_alive style), or "30d".
    A negative value means forever (returned as inf)."""
    if isinstance(value, (int, float)):
        secs = float(value)
        if math.isnan(secs):
            raise ValueError("not a duration: NaN (use e.g. 300, 30s, 5m, 1h)")
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise ValueError(f"not a duration: {value!r} (use e.g. 300, 30s, 5m, 1h)")
        secs = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]
    return float("inf") if secs < 0 else secs


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)


def parse_size(value: Any) -> int:
    """Bytes from 1073741824, "8GiB", "512MB", "1.5g" (k/m/g/t: powers of 1024 when written
    KiB/MiB/..., else of 1000 with a B, and of 1024 as a bare letter, as llama.cpp reads them)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0 or math.isnan(value):
            raise ValueError(f"not a size: {value!r}")
        return int(value)
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"not a size: {value!r} (use e.g. 8GiB, 512MiB, 2000000000)")
    unit = (m.group(2) or "b").lower()
    power = "bkmgt".index(unit[0])
    base = 1000 if unit.endswith("b") and "i" not in unit and power else 1024
    return int(float(m.group(1)) * base ** power)


def default_max_memory() -> int:
    """Three quarters of the machine's RAM: room for the OS, the server and request buffers."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
    return int(total * 0.75)


def _split_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            return list(json.loads(s))
        return [p.strip() for p in s.split(",") if p.strip()]
    return [str(v) for v in value]


def _expand(v: Path) -> Path:
    return v.expanduser()


# The value types of settings. Each carries its parser, so a field's type says how a flag, an
# INFERD_* variable or a config-file value is read (inferd/settings_table.py reads them back).
SIZE = BeforeValidator(parse_size)            # bytes: 1073741824, "8GiB", "512MB"
DURATION = BeforeValidator(parse_duration)    # seconds: 300, "5m", "1h", "-1" (= forever)
Size = Annotated[int, SIZE]
Duration = Annotated[float, DURATION]
Folder = Annotated[Path, AfterValidator(_expand)]
# env and file: "a,b" or a JSON list; the command line: a repeated flag or one "a,b"
CommaList = Annotated[list[str], NoDecode, BeforeValidator(_split_list)]

# Which commands take an option's flag (inferd/cli_api.py): COMMON every command that reads
# the settings; SERVE `serve`, its aliases and `cluster deploy`; LOCAL `serve` and its aliases
# (a server on this machine); MODEL `serve` alone; PULL `pull`; ML `ml import`.
COMMON, SERVE, LOCAL, MODEL, PULL, ML = "common", "serve", "local", "model", "pull", "ml"


def option(default: Any = None, help: str = "", *, group: str, scopes: tuple[str, ...] = (SERVE,),
           flags: tuple[str, ...] = (), metavar: str | None = None, repeat: bool = False,
           shown: str | None = None, factory: Callable[[], Any] | None = None,
           ge: float | None = None, gt: float | None = None, le: float | None = None) -> Any:
    """One setting, declared once: its default, range and help, plus where it shows on the command
    line. The field name is the config-file key and, upper-cased after INFERD_, the environment
    variable; the flag is --name-with-dashes (--no-NAME for a switch that is on by default) unless
    `flags` says otherwise. `shown` is the default as docs show it, when it is computed."""
    extra: dict[str, Any] = {"group": group, "scopes": list(scopes), "flags": list(flags), "repeat": repeat}
    if metavar:
        extra["metavar"] = metavar
    if shown is not None:
        extra["shown"] = shown
    if factory is not None:
        return Field(default_factory=factory, description=help, ge=ge, gt=gt, le=le, json_schema_extra=extra)
    return Field(default, description=help, ge=ge, gt=gt, le=le, json_schema_extra=extra)


_CACHE_TYPES = Literal["f16", "bf16", "q8_0", "q4_0", "f32"]


class Settings(BaseSettings):
    """Every setting of the server, each declared once (inferd/settings_table.py derives the flags,
    the docs and the checks from these fields)."""

    model_config = SettingsConfigDict(env_prefix="INFERD_", extra="forbid")

    # -- models: what is served
    models_dir: Folder = option(Path("~/.inferd/models"), "Antfly-layout models folder", group="models",
                                scopes=(COMMON,))
    ml_dir: Folder = option(Path("~/.inferd/ml"), "tabular predictors folder", group="models", scopes=(COMMON, ML))
    models: CommaList = option(help="serve one more model by hand; repeatable",
                               factory=list, flags=("--model",), metavar="[KIND:]NAME=PATH", repeat=True,
                               shown="none", group="models", scopes=(COMMON,))
    mmproj: CommaList = option(help="vision projector (mmproj GGUF) of a --model generator, paired in order; "
                               "repeatable", factory=list, metavar="FILE", repeat=True, shown="none",
                               group="models", scopes=(COMMON,))
    mmproj_n_threads: int | None = option(D.MMPROJ_N_THREADS, "threads of the vision projector's image encoder", metavar="N",
                                          ge=1, shown="--threads", group="models", scopes=(COMMON,))
    mmproj_gpu: bool = option(D.MMPROJ_GPU, "keep the vision projector on the CPU when layers are offloaded "
                              "(a CPU build has no GPU)", group="models", scopes=(COMMON,))
    ignore_images_without_projector: bool = option(
        False, "image parts sent to a generator without a vision projector are dropped with a warning "
        "(openai-server's behaviour) instead of a 400", group="models", scopes=(COMMON,))
    builtins: bool = option(True, "serve only configured models (plus the `fixed` chunker)", group="models",
                            scopes=(COMMON,))

    # -- server: the socket and who may use it
    host: str = option("127.0.0.1", "bind address; a non-loopback one needs --allow-insecure-public-bind",
                       group="server")
    port: int = option(8080, "port", ge=0, le=65535, group="server")
    api_key: SecretStr | None = option(None, "require Authorization: Bearer KEY on every route but health",
                                       group="server")
    allow_insecure_public_bind: bool = option(False, "allow a non-loopback --host (inferd has no TLS)",
                                              group="server")
    cors_origins: CommaList = option(help="comma-separated web origins allowed besides loopback pages "
                                     "(https://app.example, https://app.example:* for any port, * for all)",
                                     factory=list, shown="loopback only", group="server")
    allowed_hosts: CommaList = option(help="comma-separated Host names accepted besides IPs, localhost and --host "
                                      "(DNS-rebinding protection; * for all)", factory=list,
                                      shown="loopback only", group="server")

    # -- loading: models in memory
    keep_alive: Duration = option(300.0, "unload a model this long after its last use (300, 5m, 1h; -1 = never)",
                                  group="loading")
    preload: CommaList = option(help="models `inferd serve` begins loading at start, in the background (health "
                                "does not wait; a request for one waits for its load), then kept like any "
                                "other; auto: the built-in generators when no other generator is configured; "
                                "none: load everything on first use", factory=lambda: ["auto"], shown="auto",
                                metavar="NAMES", group="loading")
    max_loaded_models: int = option(4, "models loaded at once; beyond it idle ones are unloaded, LRU", ge=1,
                                    group="loading")
    # 0 = none; idle models are evicted LRU to make room, and one that cannot fit is a 507
    max_memory: Size = option(help="memory budget of loaded models (8GiB, 512MiB, bytes; 0 = none): idle models "
                              "are evicted LRU, a model that cannot fit is a 507", factory=default_max_memory,
                              ge=0, shown="75% of RAM", group="loading")

    # -- admission: requests and their sizes
    # 0 = unbounded (spec 003: the 16 MiB-per-request media caps then do not apply either)
    max_concurrent_requests: int = option(64, "inference requests running at once (0 = unbounded)", ge=0,
                                          group="admission")
    max_queued_requests: int = option(D.MAX_QUEUED_REQUESTS, "requests waiting beyond those; more get a 503", ge=0,
                                      group="admission")
    queue_timeout: Duration = option(60.0, "longest wait in the admission queue before a 503", group="admission")
    max_body_bytes: Size = option(32 * 1024 * 1024, "largest request body (32MiB, bytes); a /v1/files upload may "
                                  "also carry --max-file-bytes plus its form fields", ge=1024, group="admission")
    max_audio_bytes: Size = option(25 * 1024 * 1024, "largest audio upload; larger is a 413 (OpenAI's limit)",
                                   ge=1024, group="admission")
    max_audio_seconds: float = option(1800.0, "longest audio per request, in seconds; longer is a 413", gt=0,
                                      group="admission")
    max_batch_inputs: int = option(2048, "inputs per request: embeddings, rerank documents, extract and rewrite "
                                   "inputs", ge=1, group="admission")
    realtime_max_sessions: int = option(64, "open /v1/realtime transcription sessions at once; one more is a 503",
                                        ge=1, group="admission")
    realtime_max_buffer_seconds: float = option(60.0, "audio a realtime session buffers, the longest turn; more is "
                                                "an error event", gt=0, le=1800, group="admission")
    prep_threads: int = option(4, "threads preparing requests: templates, tokenizing, grammars", ge=1, le=64,
                               group="admission")

    # -- generation: llama.cpp generators
    parallel: int = option(D.PARALLEL, "generation slots per model", ge=1, le=256, group="generation")
    threads: int | None = option(None, "CPU threads per runtime", ge=1, shown="all cores", group="generation")
    ctx_size: int | None = option(D.CTX_SIZE, "tokens of context per generator slot", flags=("-c", "--ctx-size"), ge=16,
                                  shown="manifest or model", group="generation")
    cache_dtype: _CACHE_TYPES = option(D.CACHE_DTYPE, "generator KV cache type (a manifest's cache_dtype wins)",
                                       group="generation")
    n_gpu_layers: int = option(D.N_GPU_LAYERS, "layers llama.cpp offloads to a GPU (a CPU build has none)", ge=-1,
                               group="generation")
    cache_ram: int = option(D.CACHE_RAM_MIB, "host-RAM prompt cache per generator in MiB: evicted sequences' KV states, LRU "
                            "(0 = off)", metavar="MIB", ge=0, group="generation")
    spec_auto: bool = option(D.SPEC_AUTO, "speculation_policy auto (the default) drafts with n-gram lookup when a "
                             "greedy request names no draft model: the shared pool always, the prompt when it has "
                             "64 tokens or more; backs off when drafts are rejected", group="generation")
    spec_pool_entries: int = option(D.SPEC_POOL_ENTRIES, "slots of the n-gram pool a generator shares across its "
                                    "slots and requests (12 bytes each, allocated on first use; newer n-grams "
                                    "overwrite older ones; 0 = no pool)", metavar="N", ge=0, group="generation")
    reasoning_budget: int = option(-1, "tokens of thinking a request may use when it names no budget or effort; "
                                   "at N the end-of-thinking marker is written and the answer follows "
                                   "(-1 = unbounded; 0 = no thinking)", metavar="N", ge=-1, group="generation")
    cache_dir: Folder | None = option(None, "disk prompt cache: KV states of prompt prefixes kept in this folder "
                                      "across restarts", shown="off", group="generation")
    cache_disk_size: Size = option(D.CACHE_DISK_SIZE, "bytes the --cache-dir folder may hold, all models together, least "
                                   "recently used out first", ge=0, group="generation")
    slot_save_path: Folder | None = option(None, "folder for POST /slots/{id}?action=save|restore files",
                                           shown="off", group="generation")
    slots_show_prompts: bool = option(False, "GET /slots shows the text cached in each slot", group="generation")

    # -- encoders: ONNX embedders, rerankers, chunkers
    max_batch_tokens: int = option(D.MAX_BATCH_TOKENS, "token budget of one encoder batch", ge=64, group="encoders")
    max_batch_size: int = option(D.MAX_BATCH_SIZE, "inputs per encoder forward pass (1 disables batching)", ge=1,
                                 group="encoders")
    prefer_quantized: bool = option(D.PREFER_QUANTIZED, "load and pull model.onnx even when a quantized variant "
                                    "(model_quantized.onnx, *_int8) is there", group="encoders",
                                    scopes=(SERVE, PULL))

    # -- media: image inputs (scheduling/media.py)
    max_media_bytes: Size = option(100 * 1024 * 1024, "encoded image bytes per request, and the cap (0 = no "
                                   "media); config file: the spec's max_download_size_bytes too", ge=0,
                                   group="media")
    max_read_batch_bytes: Size = option(256 * 1024 * 1024, "encoded image bytes of one /ai/v1/read request", ge=0,
                                        group="media")
    max_image_dimension: int = option(16384, "largest image edge in pixels (0 = no per-edge limit; the pixel "
                                      "budget still applies)", ge=0, group="media")
    allow_remote_media: bool = option(False, "fetch http(s) image URLs named in requests (off: data stays on "
                                      "the host)", group="media")
    allow_private_media_urls: bool = option(False, "with --allow-remote-media, also fetch from loopback and "
                                            "private addresses", group="media")
    media_fetch_timeout: float = option(10.0, "seconds a remote image fetch may take", gt=0, group="media")

    # -- storage: uploaded files and stored responses, under data_dir
    data_dir: Folder = option(Path("~/.inferd"), "server data (uploaded files, stored responses)", group="storage")
    max_file_bytes: Size = option(32 * 1024 * 1024, "largest uploaded file (1MiB, bytes)", ge=1, group="storage")
    max_files_total_bytes: Size = option(1024 * 1024 * 1024, "quota of all uploaded files", ge=1, group="storage")
    responses_max_count: int = option(10000, "stored /v1/responses kept at most; the oldest go first", ge=1,
                                      group="storage")
    responses_max_age: Duration = option(30 * 86400.0, "drop stored /v1/responses older than this (30d, 12h, "
                                         "seconds; 0 = never)", ge=0, group="storage")

    # -- pulls: getting models (hub / Ollama registry)
    allow_downloads: bool = option(False, "a request naming hf.co/REPO:QUANT (or a repo id) not here yet "
                                   "downloads it; /api/pull works only with it", group="pulls", scopes=(LOCAL,))
    download_reserve_bytes: Size = option(1024 * 1024 * 1024, "free disk space a download must leave (1GiB, "
                                          "bytes)", ge=0, group="pulls", scopes=(LOCAL, PULL))
    ollama_registry: str = option("https://registry.ollama.ai", "Ollama registry URL of pulls and /api/pull",
                                  group="pulls", scopes=(LOCAL, PULL))
    # /api/pull may name any registry host: loopback, private and link-local ones only with this.
    allow_private_registries: bool = option(False, "/api/pull may name registry hosts on loopback, private or "
                                            "link-local addresses", group="pulls", scopes=(LOCAL,))

    # -- observability: logs, traces, shutdown
    log_level: Literal["debug", "info", "warning", "error"] = option("info", "log level", group="observability")
    log_format: Literal["text", "json"] = option("text", "json: one JSON object per line, with the request id",
                                                 group="observability")
    otlp_endpoint: str | None = option(None, "export OpenTelemetry traces over OTLP/HTTP to this collector "
                                       "(needs inferd[otel])", shown="off", group="observability")
    drain_timeout: Duration = option(30.0, "on SIGTERM or POST /admin/drain, wait this long for in-flight "
                                     "requests", group="observability")

    @field_validator("api_key", mode="after")
    @classmethod
    def _key(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and not v.get_secret_value().strip():
            raise ValueError("api_key is empty: an empty key would let an empty Bearer token in; "
                             "give a real key or none at all")
        return v

    def check_bind(self) -> None:
        """Refuse a non-loopback bind unless explicitly allowed: inferd has no TLS."""
        if self.allow_insecure_public_bind or is_loopback(self.host):
            return
        raise ConfigError(
            f"refusing to bind to non-loopback host {self.host!r}: inferd speaks plain HTTP. "
            "Keep the loopback default, or put inferd behind a proxy that terminates TLS and "
            "authenticates requests and pass --allow-insecure-public-bind."
        )

    @property
    def n_threads(self) -> int:
        return self.threads or all_cores()


def flags_of(name: str) -> tuple[str, ...]:
    """A setting's command-line flags: its own `flags`, else --name-with-dashes, and --no-NAME for
    a switch that is on by default."""
    f = Settings.model_fields[name]
    extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
    given = extra.get("flags")
    if given:
        return tuple(str(x) for x in given)  # type: ignore[union-attr]
    dashed = name.replace("_", "-")
    return (f"--no-{dashed}",) if f.default is True else (f"--{dashed}",)


def default_of(name: str) -> Any:
    """A setting's default, for code that keeps its own copy of it (RuntimeOptions, the cluster
    config): read from the one declaration, never written a second time."""
    f = Settings.model_fields[name]
    return f.get_default(call_default_factory=True)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _DictSource(PydanticBaseSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]):
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field, field_name):  # pragma: no cover - unused by __call__
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode())
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table/object")
    return spec_names({k.replace("-", "_"): v for k, v in data.items()}, path)


# The Antfly spec's names in a config file -> inferd's settings. `admission.inference.
# max_concurrent_requests` is a nested table there ([admission.inference] in TOML).
SPEC_ALIASES = {"max_download_size_bytes": "max_media_bytes"}


def spec_names(data: dict[str, Any], path: Path) -> dict[str, Any]:
    out = dict(data)
    adm = out.pop("admission", None)
    if adm is not None:
        inf = adm.get("inference") if isinstance(adm, dict) else None
        if not isinstance(inf, dict) or set(adm) != {"inference"} or set(inf) - {"max_concurrent_requests"}:
            raise ConfigError(f"config file {path}: 'admission' may only hold "
                              "inference.max_concurrent_requests")
        if "max_concurrent_requests" in inf:
            _alias(out, "max_concurrent_requests", inf["max_concurrent_requests"], "admission.inference.", path)
    for spec, ours in SPEC_ALIASES.items():
        if spec in out:
            _alias(out, ours, out.pop(spec), "", path, spec)
    return out


def _alias(out: dict[str, Any], ours: str, value: Any, prefix: str, path: Path, spec: str | None = None) -> None:
    name = prefix + (spec or ours)
    if ours in out and out[ours] != value:
        raise ConfigError(f"config file {path}: {name} and {ours} disagree")
    out[ours] = value


def load_settings(overrides: dict[str, Any] | None = None, config_file: str | Path | None = None) -> Settings:
    """Build Settings from CLI overrides (None values ignored), env and an optional file."""
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    path = config_file or os.environ.get("INFERD_CONFIG")
    file_data = read_config_file(Path(path).expanduser()) if path else {}

    class _Layered(Settings):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                       file_secret_settings):
            return (init_settings, env_settings, _DictSource(settings_cls, file_data))

    try:
        return _Layered(**cli)
    except ValidationError as e:
        raise ConfigError("invalid configuration: " + "; ".join(_problem(err) for err in e.errors())) from None
    except ValueError as e:
        raise ConfigError(f"invalid configuration: {e}") from e


def _problem(err: Any) -> str:
    """One pydantic error as the user wrote the value: the key, its flag and variable, the value."""
    name = str(err["loc"][0]) if err.get("loc") else "?"
    msg = str(err.get("msg", "")).removeprefix("Value error, ")
    if name not in Settings.model_fields:
        return f"{name}: {msg}"
    where = ", ".join([*flags_of(name)[-1:], f"INFERD_{name.upper()}"])
    got = err.get("input")
    return f"{name} ({where}): {msg}" + (f" (got {got!r})" if isinstance(got, (str, int, float)) and repr(got) not in msg else "")
