"""RuntimeOptions: what a runtime may be told by the server, typed, built once from Settings
by the composition root (inferd/service/loading.py). Runtimes read these fields and nothing
else of the server's configuration. A field that a setting feeds takes that setting's default
from its one declaration (inferd/config.py), so a runtime built without a server behaves as a
server with no flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferd.config import all_cores, default_of

MIB = 1024 * 1024


def engine_queue(max_queued_requests: int, parallel: int) -> int:
    """Generator jobs that may wait for a slot: a full engine queue is a 503, never unbounded memory."""
    return max(max_queued_requests, parallel) * 4


@dataclass(frozen=True)
class RuntimeOptions:
    threads: int = all_cores()                   # CPU threads of one model's forward passes (--threads)
    parallel: int = default_of("parallel")       # generator slots (sequences in one KV cache)
    n_ctx: int | None = default_of("ctx_size")   # tokens per generator slot (None: model default)
    n_batch: int = 512                           # tokens one generator decode step may carry (no setting)
    max_batch_tokens: int = default_of("max_batch_tokens")  # encoders: padded tokens one forward pass may carry
    max_batch_size: int = default_of("max_batch_size")      # encoders: inputs one forward pass may carry
    prefer_quantized: bool = default_of("prefer_quantized")  # ONNX: model_quantized.onnx / *_int8 when present
    max_waiting: int = engine_queue(default_of("max_queued_requests"), default_of("parallel"))
    cache_dtype: str = default_of("cache_dtype")  # generator KV cache type (manifest `cache_dtype` wins)
    n_gpu_layers: int = default_of("n_gpu_layers")  # layers llama.cpp offloads (0 on a CPU build)
    cache_ram: int = default_of("cache_ram") * MIB  # generator: bytes of host-RAM prompt cache per model (0: off)
    mmproj_threads: int | None = default_of("mmproj_n_threads")  # vision projector threads (None: `threads`)
    mmproj_gpu: bool = default_of("mmproj_gpu")   # projector on the GPU when layers are offloaded
    cache_dir: str | None = None                 # generator: folder of the disk prompt cache (None: off)
    cache_disk_size: int = default_of("cache_disk_size")  # bytes that folder may hold (all models together)
