"""A llama.cpp context holding several sequences in one unified KV cache, and the batch
that feeds it. Used only by the generation worker thread (a context is not thread-safe).

Why a unified KV cache: cells can then belong to several sequences at once, so a prompt
prefix already computed by one sequence is shared with another by `seq_cp` (no copy, no
recompute). Why `swa_full` (with several sequences): models with sliding-window attention
(Gemma 3) would otherwise keep about n_swa x n_seq + n_batch cells in those layers, and cells
shared by two sequences are never reclaimed there (llama.cpp reuses a masked cell only when one
sequence holds it), so sharing a long prompt between siblings could run the cache out of room.
With one sequence nothing is shared, and the small cache is what llama-server runs: a long
prompt's last chunks attend over ~1,000 cells instead of every earlier position (about 25%
faster prefill of 4,000 tokens on gemma 3); a prefix cut back past the window is refused by
the scheduler's `reusable` check and prefilled again."""

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
    cache_dtype: str = "f16"   # K and V element type
    swa_full: bool = True      # full-size sliding-window layers (see the module docstring)


# ggml_type ids (ggml.h); bf16 is 30
KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}
KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # per element


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
        p.swa_full = cfg.swa_full
        p.no_perf = True
        p.type_k = p.type_v = KV_TYPES[cfg.cache_dtype]  # quantized V needs flash attention: llama.cpp's auto
        ctx = L.llama_init_from_model(model.ptr, p)
        if not ctx:
            raise ModelLoadFailed(f"llama.cpp could not create a context of {p.n_ctx} tokens for {model.path}")
        self.ptr = ctx
        self.mem = L.llama_get_memory(ctx)
        self.batch = L.llama_batch_init(cfg.n_batch, 0, cfg.n_seq)
        self._adapters: dict[str, ctypes.c_void_p] = {}
        self.adapter = ""  # the LoRA set applied now ("path@scale"), part of the disk cache's identity

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
        # `want` is how many trailing tokens of the entry want logits (True = 1): speculative
        # verification reads a row per draft token; their rows are contiguous, ending at the one returned.
        for seq, toks, p0, want in entries:
            for j, tok in enumerate(toks):
                b.token[n] = tok
                b.pos[n] = p0 + j
                b.n_seq_id[n] = 1
                b.seq_id[n][0] = seq
                b.logits[n] = 0
                n += 1
            for i in range(int(want)):
                b.logits[n - 1 - i] = 1
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

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        L.llama_memory_seq_add(self.mem, seq, p0, p1, delta)

    def can_shift(self) -> bool:
        return bool(L.llama_memory_can_shift(self.mem))

    def clear(self) -> None:
        L.llama_memory_clear(self.mem, True)

    # ---- host copies of one sequence (the host-RAM prompt cache) ----------------------------
    def seq_state(self, seq: int) -> bytes:
        n = L.llama_state_seq_get_size(self.ptr, seq)
        buf = (ctypes.c_uint8 * n)()
        got = L.llama_state_seq_get_data(self.ptr, buf, n, seq)
        return ctypes.string_at(buf, got)  # one copy; bytes(buf[:got]) built a list of ints first

    def set_seq_state(self, seq: int, data: bytes) -> bool:
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        return L.llama_state_seq_set_data(self.ptr, buf, len(data), seq) > 0

    def seq_pos_min(self, seq: int) -> int:
        """The smallest position `seq` still holds in every layer's cache (-1: empty). Above 0
        when a sliding-window cache dropped cells: the prefix can then not be reused."""
        return int(L.llama_memory_seq_pos_min(self.mem, seq))

    def save_seq_file(self, seq: int, path: str, tokens: list[int]) -> int:
        """llama.cpp's own sequence file (llama-server's slot save format); bytes written."""
        arr = (L.llama_token * len(tokens))(*tokens)
        return int(L.llama_state_seq_save_file(self.ptr, path.encode(), seq, arr, len(tokens)))

    def load_seq_file(self, seq: int, path: str, capacity: int) -> tuple[int, list[int]]:
        """(bytes read, tokens) of a sequence file loaded into `seq`; 0 bytes on failure."""
        arr = (L.llama_token * capacity)()
        n = ctypes.c_size_t(0)
        got = L.llama_state_seq_load_file(self.ptr, path.encode(), seq, arr, capacity, ctypes.byref(n))
        return int(got), list(arr[:n.value]) if got else []

    # ---- LoRA ----------------------------------------------------------------------------
    def load_adapter(self, path: str) -> ctypes.c_void_p:
        """The adapter at `path`, loaded once (freed with the model). Raises InvalidInput for a
        file that is not a LoRA of this model."""
        ad = self._adapters.get(path)
        if ad is None:
            ad = L.llama_adapter_lora_init(self.model.ptr, path.encode())
            if not ad:
                raise InvalidInput(f"could not load LoRA adapter {path} (not a LoRA GGUF for this model?)")
            self._adapters[path] = ad
        return ad

    def set_adapters(self, adapters: tuple[tuple[str, float], ...]) -> None:
        """Decode with these (path, scale) adapters from now on (() : the base weights).
        llama.cpp keeps one set per context; the engine switches it between the decodes of
        a step, one decode per set."""
        if not adapters:
            L.llama_set_adapters_lora(self.ptr, None, 0, None)
            self.adapter = ""
            return
        n = len(adapters)
        arr = (L.llama_adapter_lora_p_ctypes * n)(
            *(ctypes.cast(self.load_adapter(p), L.llama_adapter_lora_p_ctypes) for p, _s in adapters))
        rc = L.llama_set_adapters_lora(self.ptr, arr, n, (ctypes.c_float * n)(*(s for _p, s in adapters)))
        if rc != 0:
            raise InvalidInput(f"llama.cpp refused LoRA adapters {[p for p, _s in adapters]} (code {rc})")
        self.adapter = ";".join(f"{p}@{s}" for p, s in adapters)  # the disk cache's identity of these cells
