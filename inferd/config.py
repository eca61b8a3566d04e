"""Settings: CLI flags > INFERD_* environment variables > config file (TOML or JSON) > defaults."""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERD_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    models_dir: Path = Path("~/.inferd/models")
    ml_dir: Path = Path("~/.inferd/ml")
    models: Annotated[list[str], NoDecode] = Field(default_factory=list)
    mmproj: Annotated[list[str], NoDecode] = Field(default_factory=list)  # projectors of --model generators
    api_key: SecretStr | None = None
    allow_insecure_public_bind: bool = False
    builtins: bool = True

    keep_alive: float = 300.0
    max_loaded_models: int = Field(4, ge=1)
    # Memory budget of loaded models (bytes or "8GiB"; 0 = none); idle models are evicted LRU
    # to make room, and a model that cannot fit is a 507.
    max_memory: int = Field(default_factory=default_max_memory, ge=0)
    # 0 = unbounded (spec 003: the 16 MiB-per-request media caps then do not apply either)
    max_concurrent_requests: int = Field(64, ge=0)
    max_queued_requests: int = Field(256, ge=0)
    queue_timeout: float = 60.0
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    max_audio_bytes: int = Field(25 * 1024 * 1024, ge=1024)   # OpenAI's upload limit
    max_audio_seconds: float = Field(1800.0, gt=0)            # 30 minutes of audio per request
    realtime_max_sessions: int = Field(64, ge=1)               # open /v1/realtime sessions at once
    realtime_max_buffer_seconds: float = Field(60.0, gt=0, le=1800)  # audio one session buffers (one turn at most)

    parallel: int = Field(4, ge=1, le=256)
    ctx_size: int | None = Field(None, ge=16)   # tokens per generator slot (None: manifest or model)
    cache_dtype: Literal["f16", "bf16", "q8_0", "q4_0", "f32"] = "f16"  # generator KV cache type
    n_gpu_layers: int = Field(0, ge=-1)         # passed to llama.cpp
    cache_ram: int = Field(0, ge=0)             # MiB of host-RAM prompt cache per generator (0: off)
    mmproj_n_threads: int | None = Field(None, ge=1)  # vision projector threads (None: --threads)
    mmproj_gpu: bool = True                     # --no-mmproj-gpu: keep the projector on the CPU
    ignore_images_without_projector: bool = False  # openai-server: drop image parts (warning) instead of a 400
    reasoning_budget: int = Field(-1, ge=-1)    # thinking tokens of requests that name no budget (-1: unbounded)
    cache_dir: Path | None = None               # disk prompt cache: sequence states that survive restarts
    cache_disk_size: int = Field(2 << 30, ge=0)  # bytes the cache dir may hold (LRU), "2GiB"
    slot_save_path: Path | None = None          # POST /slots/{id}?action=save|restore files live here (None: off)
    threads: int | None = Field(None, ge=1)
    max_batch_tokens: int = Field(8192, ge=64)
    max_batch_size: int = Field(512, ge=1)      # inputs per encoder forward pass; 1 = no batching
    prefer_quantized: bool = True               # ONNX: pick model_quantized.onnx / *_int8 when present
    max_batch_inputs: int = Field(2048, ge=1)   # inputs per request: embeddings, rerank documents, extract, rewrite
    prep_threads: int = Field(4, ge=1, le=64)   # threads preparing requests (templates, tokenizing, grammars)
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)  # Host values besides loopback

    # Server-side storage (uploaded files) and getting models (hub / Ollama registry pulls).
    data_dir: Path = Path("~/.inferd")
    # Image inputs (scheduling/media.py): per-request byte cap, per-edge cap, remote fetches.
    max_media_bytes: int = Field(100 * 1024 * 1024, ge=0)   # config file: max_download_size_bytes too
    max_read_batch_bytes: int = Field(256 * 1024 * 1024, ge=0)  # /ai/v1/read: encoded image bytes per request
    max_image_dimension: int = Field(16384, ge=0)  # 0: no per-edge limit (the pixel budget still applies)
    allow_remote_media: bool = False
    allow_private_media_urls: bool = False
    media_fetch_timeout: float = Field(10.0, gt=0)
    max_file_bytes: int = Field(32 * 1024 * 1024, ge=1)
    max_files_total_bytes: int = Field(1024 * 1024 * 1024, ge=1)
    # Stored responses (/v1/responses, store: true): <data_dir>/responses.sqlite3, oldest dropped first.
    responses_max_count: int = Field(10000, ge=1)
    responses_max_age: float = Field(30 * 86400.0, ge=0)     # seconds (or "30d"); 0 = no age bound
    allow_downloads: bool = False               # a request naming a model that is not local may pull it
    download_reserve_bytes: int = Field(1024 * 1024 * 1024, ge=0)   # free disk a download must leave
    ollama_registry: str = "https://registry.ollama.ai"
    # /api/pull may name any registry host: loopback, private and link-local ones only with this.
    allow_private_registries: bool = False

    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)  # besides loopback origins
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"

    drain_timeout: float = 30.0                 # SIGTERM / POST /admin/drain: longest wait for in-flight work
    slots_show_prompts: bool = False            # GET /slots shows each slot's cached text
    otlp_endpoint: str | None = None            # OpenTelemetry OTLP/HTTP collector (needs the otel extra)

    @field_validator("models", "mmproj", "cors_origins", "allowed_hosts", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> list[str]:
        return _split_list(v)

    @field_validator("api_key", mode="after")
    @classmethod
    def _key(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and not v.get_secret_value().strip():
            raise ValueError("api_key is empty: an empty key would let an empty Bearer token in; "
                             "give a real key or none at all")
        return v

    @field_validator("max_memory", "max_body_bytes", "max_audio_bytes", "max_media_bytes", "max_read_batch_bytes",
                     "max_file_bytes", "max_files_total_bytes", "download_reserve_bytes", "cache_disk_size",
                     mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return parse_size(v)

    @field_validator("keep_alive", "queue_timeout", "drain_timeout", "responses_max_age", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("models_dir", "ml_dir", "data_dir", "cache_dir", "slot_save_path", mode="after")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return v.expanduser() if v is not None else None

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
        return self.threads or max(1, os.cpu_count() or 1)


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
    except ValueError as e:
        raise ConfigError(f"invalid configuration: {e}") from e
