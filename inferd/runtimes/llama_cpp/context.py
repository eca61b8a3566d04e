"""A llama.cpp context holding several sequences in one unified KV cache, and the batch
that feeds it. Used only by the generation worker thread (a context is not thread-safe).

Why a unified KV cache: cells can then belong to several sequences at once, so a prompt
prefix already computed by one sequence is shared with another by `seq_cp` (no copy, no
recompute). Why `swa_full`: models with sliding-window attention (Gemma 3) would otherwise
drop old cells, and a shared or truncated prefix could no longer be reused."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp as L
import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.runtimes.llama_cpp.model import LlamaModel


@dataclass(frozen=True)
class ContextConfig:
    n_seq: int          # parallel sequences (slots)
    n_ctx_seq: int      # tokens one sequence may hold
    n_batch: int        # tokens one llama_decode may carry
    n_threads: int


class DecodeError(RuntimeError):
    """llama_decode failed; every sequence in the batch is lost."""


class LlamaContext:
    def __init__(self, model: LlamaModel, cfg: ContextConfig):
        self.model, self.cfg = model, cfg
        p = L.llama_context_default_params()
        p.n_ctx = cfg.n_ctx_seq * cfg.n_seq
        p.n_batch = p.n_ubatch = cfg.n_batch
        p.n_seq_max = cfg.n_seq
        p.n_threads = p.n_threads_batch = cfg.n_threads
        p.kv_unified = True
        p.swa_full = True
        p.no_perf = True
        ctx = L.llama_init_from_model(model.ptr, p)
        if not ctx:
            raise ModelLoadFailed(f"llama.cpp could not create a context of {p.n_ctx} tokens for {model.path}")
        self.ptr = ctx
        self.mem = L.llama_get_memory(ctx)
        self.batch = L.llama_batch_init(cfg.n_batch, 0, cfg.n_seq)
        self._adapters: dict[str, ctypes.c_void_p] = {}

    def close(self) -> None:
        if self.ptr:
            L.llama_batch_free(self.batch)
            L.llama_free(self.ptr)
            self.ptr = None

    # ---- decoding ---------------------------------------------------------------------------
    def decode(self, entries: list[tuple[int, list[int], int, bool]]) -> list[int]:
        """ONE llama_decode for every (seq, tokens, first position, want logits of last token).
        Returns, per entry, the batch row of its logits (-1 where not wanted)."""
        b = self.batch
        n = 0
        rows: list[int] = []
        for seq, toks, p0, want in entries:
            for j, tok in enumerate(toks):
                b.token[n] = tok
                b.pos[n] = p0 + j
                b.n_seq_id[n] = 1
                b.seq_id[n][0] = seq
                b.logits[n] = 0
                n += 1
            if want:
                b.logits[n - 1] = 1
            rows.append(n - 1 if want else -1)
        if n > self.cfg.n_batch:
            raise DecodeError(f"batch of {n} tokens exceeds n_batch {self.cfg.n_batch}")
        b.n_tokens = n
        rc = L.llama_decode(self.ptr, b)
        if rc != 0:
            raise DecodeError(f"llama_decode failed with code {rc}" +
                              (" (no room left in the KV cache)" if rc == 1 else ""))
        return rows

    def decode_embd(self, seq: int, embd: np.ndarray, p0: int, want: bool, non_causal: bool = False) -> int:
        """Decode precomputed input embeddings ([n, n_embd] float32, e.g. an image's) for one
        sequence at positions p0.. . Causal spans longer than n_batch go in several decodes;
        a non-causal span (the model attends over the whole image at once) must fit one.
        Returns the row of the last position's logits (-1 when not wanted)."""
        n, dim = embd.shape
        step = self.cfg.n_batch
        if non_causal and n > step:
            raise DecodeError(f"an image of {n} tokens needs n_batch >= {n} (this context has {step})")
        embd = np.ascontiguousarray(embd, dtype=np.float32)
        if non_causal:
            L.llama_set_causal_attn(self.ptr, False)
        try:
            row = -1
            for a in range(0, n, step):
                m = min(step, n - a)
                b = L.llama_batch_init(m, dim, 1)
                try:
                    ctypes.memmove(b.embd, embd[a:a + m].ctypes.data, m * dim * 4)
                    for j in range(m):
                        b.pos[j] = p0 + a + j
                        b.n_seq_id[j] = 1
                        b.seq_id[j][0] = seq
                        b.logits[j] = 0
                    last = a + m == n
                    if want and last:
                        b.logits[m - 1] = 1
                    b.n_tokens = m
                    rc = L.llama_decode(self.ptr, b)
                    if rc != 0:
                        raise DecodeError(f"llama_decode of image embeddings failed with code {rc}")
                    row = m - 1 if want and last else -1
                finally:
                    L.llama_batch_free(b)
            return row
        finally:
            if non_causal:
                L.llama_set_causal_attn(self.ptr, True)

    def logits(self, row: int) -> np.ndarray:
        """A view of one row's logits; valid until the next decode."""
        return np.ctypeslib.as_array(L.llama_get_logits_ith(self.ptr, row), (self.model.n_vocab,))

    # ---- KV cache ---------------------------------------------------------------------------
    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        return bool(L.llama_memory_seq_rm(self.mem, seq, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        L.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def clear(self) -> None:
        L.llama_memory_clear(self.mem, True)

    # ---- LoRA -------------------------------------------------------------------------------
    def set_adapter(self, path: str | None, scale: float = 1.0) -> None:
        """Apply one LoRA adapter (None: base weights). The KV cache was computed with the old
        weights, so callers clear it (GenerationEngine.call_when_idle does)."""
        if path is None:
            L.llama_set_adapters_lora(self.ptr, None, 0, None)
            return
        ad = self._adapters.get(path)
        if ad is None:
            ad = L.llama_adapter_lora_init(self.model.ptr, path.encode())
            if not ad:
                raise InvalidInput(f"could not load LoRA adapter {path} (not a LoRA GGUF for this model?)")
            self._adapters[path] = ad  # freed with the model
        arr = (L.llama_adapter_lora_p_ctypes * 1)(ctypes.cast(ad, L.llama_adapter_lora_p_ctypes))
        rc = L.llama_set_adapters_lora(self.ptr, arr, 1, (ctypes.c_float * 1)(scale))
        if rc != 0:
            raise InvalidInput(f"llama.cpp refused LoRA adapter {path} (code {rc})")
