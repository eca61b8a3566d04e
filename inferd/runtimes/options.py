"""RuntimeOptions: what a runtime may be told by the server, typed, built once from Settings
by the composition root (inferd/service/loading.py). Runtimes read these fields and nothing
else of the server's configuration. A field that a setting feeds takes that setting's default
from inferd/defaults.py, where the settings model takes it too, so a runtime built without a
server behaves as a server with no flags."""

from __future__ import annotations

from dataclasses import dataclass

import inferd.defaults as D
from inferd.defaults import all_cores

MIB = 1024 * 1024


def engine_queue(max_queued_requests: int, parallel: int) -> int:
    """Generator jobs that may wait for a slot: a full engine queue is a 503, never unbounded memory."""
    return max(max_queued_requests, parallel) * 4


@dataclass(frozen=True)
class RuntimeOptions:
    threads: int = all_cores()                   # CPU threads of one model's forward passes (--threads)
    parallel: int = D.PARALLEL       # generator slots (sequences in one KV cache)
    n_ctx: int | None = D.CTX_SIZE   # tokens per generator slot (None: model default)
    n_batch: int = 512                           # tokens one generator decode step may carry (no setting)
    max_batch_tokens: int = D.MAX_BATCH_TOKENS  # encoders: padded tokens one forward pass may carry
    max_batch_size: int = D.MAX_BATCH_SIZE      # encoders: inputs one forward pass may carry
    prefer_quantized: bool = D.PREFER_QUANTIZED  # ONNX: model_quantized.onnx / *_int8 when present
    max_waiting: int = engine_queue(D.MAX_QUEUED_REQUESTS, D.PARALLEL)
    cache_dtype: str = D.CACHE_DTYPE  # generator KV cache type (manifest `cache_dtype` wins)
    n_gpu_layers: int = D.N_GPU_LAYERS  # layers llama.cpp offloads (0 on a CPU build)
    cache_ram: int = D.CACHE_RAM_MIB * MIB  # generator: bytes of host-RAM prompt cache per model (0: off)
    mmproj_threads: int | None = D.MMPROJ_N_THREADS  # vision projector threads (None: `threads`)
    mmproj_gpu: bool = D.MMPROJ_GPU   # projector on the GPU when layers are offloaded
    cache_dir: str | None = None                 # generator: folder of the disk prompt cache (None: off)
    cache_disk_size: int = D.CACHE_DISK_SIZE  # bytes that folder may hold (all models together)
    spec_auto: bool = D.SPEC_AUTO     # generator: speculation_policy auto drafts n-grams when nothing is named
    spec_pool_entries: int = D.SPEC_POOL_ENTRIES  # generator: slots of the shared n-gram pool (0: none)
