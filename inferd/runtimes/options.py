"""RuntimeOptions: what a runtime may be told by the server, typed, built once from Settings
by the composition root (inferd/service/loading.py). Runtimes read these fields and nothing
else of the server's configuration."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeOptions:
    threads: int = max(1, os.cpu_count() or 1)   # CPU threads of one model's forward passes
    parallel: int = 4                            # generator slots (sequences in one KV cache)
    n_ctx: int | None = None                     # tokens per generator slot (None: model default)
    n_batch: int = 512                           # tokens one generator decode step may carry
    max_batch_tokens: int = 8192                 # encoders: padded tokens one forward pass may carry
    max_batch_size: int = 512                    # encoders: inputs one forward pass may carry
    prefer_quantized: bool = True                # ONNX: model_quantized.onnx / *_int8 when present
    max_waiting: int = 1024                      # generator: jobs that may wait for a slot
    cache_dtype: str = "f16"                     # generator KV cache type (manifest `cache_dtype` wins)
    n_gpu_layers: int = 0                        # layers llama.cpp offloads (0 on a CPU build)
    cache_ram: int = 0                           # generator: bytes of host-RAM prompt cache per model (0: off)
    mmproj_threads: int | None = None            # vision projector threads (None: `threads`)
    mmproj_gpu: bool = True                      # projector on the GPU when layers are offloaded
    cache_dir: str | None = None                 # generator: folder of the disk prompt cache (None: off)
    cache_disk_size: int = 2 << 30               # bytes that folder may hold (all models together)
