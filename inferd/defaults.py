"""The defaults of the settings that code below the settings model also needs (RuntimeOptions,
the encoder batcher, the cluster config). Each value is written once, here; inferd/config.py
declares the option itself (help, range, flag, env name) and takes its default from this table.
A plain module of the shared base: it imports nothing, so runtimes and schedulers may read it
without reaching up into the server's configuration."""

from __future__ import annotations

import os

PARALLEL = 4                 # generation slots per model
CTX_SIZE: int | None = None  # tokens per generator slot (None: the model's own)
MAX_QUEUED_REQUESTS = 256    # requests waiting beyond the running ones
CACHE_DTYPE = "f16"          # generator KV cache type
N_GPU_LAYERS = 0             # layers llama.cpp offloads
CACHE_RAM_MIB = 0            # host-RAM prompt cache per generator, MiB (0: off)
CACHE_DISK_SIZE = 2 << 30    # bytes the disk prompt cache may hold
MAX_BATCH_TOKENS = 8192      # token budget of one encoder batch
MAX_BATCH_SIZE = 512         # inputs per encoder forward pass
PREFER_QUANTIZED = True      # ONNX: the int8 graph when a folder has both
MMPROJ_N_THREADS: int | None = None  # vision projector threads (None: `threads`)
SPEC_AUTO = True             # speculation_policy auto drafts with n-gram lookup when nothing is named
SPEC_POOL_ENTRIES = 1 << 19  # slots of a generator's shared n-gram pool (12 bytes each; 0: no pool)
MMPROJ_GPU = True            # projector on the GPU when layers are offloaded


def all_cores() -> int:
    """What `threads` unset means: every core the machine has."""
    return max(1, os.cpu_count() or 1)
