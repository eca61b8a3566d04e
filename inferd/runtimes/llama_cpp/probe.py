"""The self-check's child (selfcheck.py): load a GGUF and run the kernels a server runs, a
16-token prefill batch and then one token. If this build's kernels for the model's type do not
run on this CPU, this process dies by a signal, not the server.

    python -m inferd.runtimes.llama_cpp.probe MODEL.gguf THREADS"""

from __future__ import annotations

import sys
from pathlib import Path

import llama_cpp as L

from inferd.runtimes.llama_cpp.model import LlamaModel


def probe(path: str, n_threads: int) -> None:
    model = LlamaModel(Path(path))
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 64, 32, 32, 1
    params.n_threads = params.n_threads_batch = n_threads
    ctx = L.llama_init_from_model(model.ptr, params)
    if not ctx:
        raise SystemExit("llama_init_from_model failed")
    prompt = (L.llama_token * 16)(*[t % model.n_vocab for t in range(1, 17)])  # kept alive across the call
    if L.llama_decode(ctx, L.llama_batch_get_one(prompt, 16)) != 0:
        raise SystemExit("prefill decode failed")
    one = (L.llama_token * 1)(1 % model.n_vocab)
    if L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) != 0:
        raise SystemExit("decode failed")
    L.llama_free(ctx)
    model.close()
    print("ok")


if __name__ == "__main__":
    probe(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
