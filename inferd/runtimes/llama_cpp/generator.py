"""LlamaGenerator: one loaded GGUF generator = model + multi-sequence context.

A leaf: it satisfies the generation engine's Backend Protocol structurally (decode, sample,
KV-cache edits; only the engine's worker thread calls those, and `warm_up` / `set_adapters`)
and offers the service tokenize / detokenize, `chat_template`, `make_sampler`. The
composition root (inferd/service/loading.py) wraps it in a GenerationEngine."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.models import ModelSpec, model_ggufs
from inferd.runtimes.llama_cpp import selfcheck
from inferd.runtimes.llama_cpp.grammar_vocab import GrammarVocabView
from inferd.runtimes.llama_cpp.context import KV_BYTES, KV_TYPES, ContextConfig, LlamaContext
from inferd.runtimes.llama_cpp.model import LlamaModel, open_model
from inferd.runtimes.llama_cpp.sampling import Sampler, token_logprob
from inferd.runtimes.llama_cpp.vision import ImageChunk, Projector
from inferd.runtimes.options import RuntimeOptions
from inferd.types import Image, SamplingParams, TokenLogprob

log = logging.getLogger("inferd.llama")

DEFAULT_CTX = 4096       # per sequence, when neither the manifest nor the model asks for less
DEFAULT_BATCH = 512      # tokens per decode step (next tokens + prefill chunks)


def resolve_gguf(spec: ModelSpec) -> Path:
    """The weights file of a generator spec: a .gguf file, or the first weights file of a
    folder (the first shard of a split model)."""
    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no file")
    path = Path(spec.path)
    if path.is_dir():
        files = [p for p in model_ggufs(path) if "-of-" not in p.stem or "-00001-of-" in p.stem]
        if not files:
            raise ModelLoadFailed(f"model '{spec.name}': no .gguf weights in {path}")
        return files[0]
    return path


class LlamaGenerator:
    def __init__(self, spec: ModelSpec, n_seq: int = 4, n_threads: int | None = None,
                 n_ctx: int | None = None, n_batch: int = DEFAULT_BATCH, mmproj: Path | None = None,
                 cache_dtype: str = "f16", n_gpu_layers: int = 0, mmproj_threads: int | None = None,
                 mmproj_gpu: bool = True, builtin_templates: Mapping[str, str] | None = None,
                 swa_full: bool | None = None):
        """`builtin_templates`: architecture -> the chat template of GGUFs that ship none (gemma);
        passed in by the loader (inferd/chat has them: a runtime imports nothing above it).
        `swa_full`: None = only with several sequences (context.py says why)."""
        self.spec, self.name = spec, spec.name
        self.size_bytes = 0  # weights + KV cache, estimated below (the registry's memory budget)
        if cache_dtype not in KV_TYPES:
            raise ModelLoadFailed(f"model '{spec.name}': cache_dtype {cache_dtype!r} is not one of "
                                  f"{', '.join(KV_TYPES)}")
        self.cache_dtype = cache_dtype
        weights = resolve_gguf(spec)
        # Before this process touches the weights: a type whose kernels die here is refused (selfcheck.py).
        self.quant_type = selfcheck.require(weights, n_threads or os.cpu_count() or 1, spec.name)
        self.model = open_model(weights, n_gpu_layers)  # begun by --preload's prefetch, or now
        try:
            asked = n_ctx or spec.manifest.get("n_ctx") or spec.manifest.get("context_length")
            want = int(asked or DEFAULT_CTX)
            # The default stays within the trained context; an explicit size is the operator's
            # choice (llama.cpp runs past it, with quality loss), e.g. a small test model.
            self.n_ctx_seq = max(16, want if asked else min(want, self.model.n_ctx_train or want))
            if asked and self.model.n_ctx_train and want > self.model.n_ctx_train:
                log.warning("%s: n_ctx %d exceeds the %d tokens the model was trained on", spec.name, want,
                            self.model.n_ctx_train)
            self.n_seq = n_seq
            self.n_batch = max(n_batch, n_seq)  # every generating sequence fits one step
            cfg = ContextConfig(n_seq=n_seq, n_ctx_seq=self.n_ctx_seq, n_batch=self.n_batch,
                                n_threads=n_threads or os.cpu_count() or 1, cache_dtype=cache_dtype,
                                swa_full=n_seq > 1 if swa_full is None else swa_full)
            self.ctx = LlamaContext(self.model, cfg)
            self.projector: Projector | None = None
            if mmproj is not None:  # images in prompts (vision.py)
                # on the GPU only when the model's layers are (a CPU build has none: both stay here)
                self.projector = Projector(mmproj, self.model, mmproj_threads or cfg.n_threads,
                                           use_gpu=mmproj_gpu and n_gpu_layers != 0)
        except BaseException:
            if getattr(self, "ctx", None) is not None:
                self.ctx.close()
            self.model.close()
            raise
        self.chat_template = self._template(builtin_templates or {})
        self._adapter_lock = threading.Lock()  # adapters load on request threads, apply on the worker
        self.bos_text = self.model.token_text(self.model.bos) if self.model.bos >= 0 else ""
        self.eos_text = self.model.token_text(self.model.eos) if self.model.eos >= 0 else ""
        self.size_bytes = estimate_bytes(self.model, n_seq * self.n_ctx_seq, KV_BYTES[cache_dtype])

    def warm_up(self) -> None:
        """One tiny decode at load: llama.cpp sizes its compute buffers on the first call,
        which would otherwise land on the first request's time to first token. Called on the
        engine's worker thread, like every decode of this context: llama.cpp's OpenMP builds a
        thread team per calling thread, and a second team (the loader's) slowed every later
        decode by about a third on 2 cores."""
        tok = self.model.bos if self.model.bos >= 0 else 0
        try:
            self.ctx.decode([(0, [tok], 0, True)])
        finally:
            self.ctx.clear()

    def _template(self, builtin: Mapping[str, str]) -> str | None:
        return (self.spec.manifest.get("chat_template") or self.model.chat_template
                or builtin.get(self.model.architecture))

    def close(self) -> None:
        """Free the native context and weights. Only once the engine's worker has stopped:
        the composition root's handle guarantees that."""
        if self.projector is not None:
            self.projector.close()
        self.ctx.close()
        self.model.close()

    # ---- for the service (any thread) -------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.model.tokenize(text, add_special, parse_special)

    def tokenize_rendered(self, text: str) -> list[int]:
        """Tokens of a rendered chat prompt. Templates write BOS themselves; adding another
        would put two at the start, so BOS is added only when the text lacks it."""
        has_bos = bool(self.bos_text) and text.startswith(self.bos_text)
        return self.model.tokenize(text, add_special=not has_bos, parse_special=True)

    def detokenize(self, tokens: list[int]) -> str:
        return self.model.detokenize(tokens)

    @property
    def fim_tokens(self) -> dict[str, int]:
        return self.model.fim_tokens

    @property
    def bos_token(self) -> int | None:
        """The BOS id a text prompt starts with (None: this vocabulary adds none)."""
        return self.model.bos if self.model.add_bos and self.model.bos >= 0 else None

    def token_bytes(self, token: int) -> bytes:
        return self.model.piece(token, special=True)

    def check_tokens(self, tokens: list[int], param: str = "prompt") -> None:
        self.model.check_tokens(tokens, param)

    @property
    def vision(self) -> bool:
        return self.projector is not None

    def tokenize_multimodal(self, text: str, images: list[Image]) -> tuple[list[int], dict[int, ImageChunk]]:
        """A rendered prompt with one media marker per image -> ids (images as placeholder
        spans) and the image chunks by span start. BOS as in tokenize_rendered."""
        if self.projector is None:
            raise InvalidInput(f"model '{self.name}' cannot read images (no vision projector)", "messages")
        has_bos = bool(self.bos_text) and text.startswith(self.bos_text)
        return self.projector.tokenize(text, images, add_special=not has_bos)

    @property
    def media_marker(self) -> str | None:
        return self.projector.marker if self.projector is not None else None

    def make_sampler(self, params: SamplingParams) -> Sampler:
        return Sampler(self.model, params)

    @cached_property
    def grammar_vocab(self) -> GrammarVocabView:
        """What a grammar can match in this vocabulary (checked before sampling starts)."""
        return GrammarVocabView(self.model)

    def load_adapter(self, path: str) -> None:
        """Load a LoRA adapter before a request uses it (any thread, before the job is
        submitted): a bad file is then that request's 400, not a failed decode step."""
        with self._adapter_lock:
            self.ctx.load_adapter(path)

    def set_adapters(self, adapters: tuple[tuple[str, float], ...]) -> None:
        """Worker thread: the LoRA set of the decodes that follow (the engine groups by it)."""
        with self._adapter_lock:
            self.ctx.set_adapters(adapters)

    # ---- Backend (worker thread only) -------------------------------------------------------
    def decode(self, entries: list[tuple[int, list[int], int, bool]]) -> list[int]:
        return self.ctx.decode(entries)

    def sample(self, sampler: Sampler, row: int) -> int:
        return sampler.sample(self.ctx.ptr, row)

    def force(self, sampler: Sampler, token: int) -> bool:
        return sampler.force(token)

    def logprob(self, row: int, token: int, top_n: int) -> TokenLogprob:
        return token_logprob(self.model, self.ctx.logits(row), token, top_n)

    def piece(self, token: int) -> bytes:
        return self.model.piece(token)

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def decode_media(self, seq: int, chunk: ImageChunk, p0: int, want: bool) -> int:
        """Encode an image and decode its embeddings at p0.. of `seq` (worker thread)."""
        assert self.projector is not None
        try:
            embd = self.projector.encode(chunk)
        finally:
            chunk.close()  # encoded once; a later turn finds its cells in the prefix cache
        return self.ctx.decode_embd(seq, embd, p0, want, chunk.non_causal)

    def seq_rm(self, seq: int, p0: int, p1: int) -> bool:
        return self.ctx.seq_rm(seq, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        self.ctx.seq_cp(src, dst, p0, p1)

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        self.ctx.seq_add(seq, p0, p1, delta)

    def can_shift(self) -> bool:
        return self.ctx.can_shift()

    def seq_state(self, seq: int) -> bytes:
        return self.ctx.seq_state(seq)

    def set_seq_state(self, seq: int, data: bytes) -> bool:
        return self.ctx.set_seq_state(seq, data)

    @cached_property
    def _memory_kind(self) -> tuple[int, bool]:
        """(sliding window in tokens or 0, recurrent or hybrid)."""
        import llama_cpp as L

        m = self.model.ptr
        return int(L.llama_model_n_swa(m)), bool(L.llama_model_is_recurrent(m) or L.llama_model_is_hybrid(m))

    def reuse_floor(self, n_tokens: int) -> int:
        """The shortest prefix a saved state of `n_tokens` (llama_state_seq_get_data) can be cut
        back to and still be resumed. llama.cpp writes a sliding-window layer's cells only within
        the window of the sequence's last position (swa_full or not), so a restored SWA state
        resumes at its end or one token before it (the last prompt token decoded again), never
        further back; a recurrent state only at its end."""
        n_swa, recurrent = self._memory_kind
        if recurrent:
            return n_tokens
        return n_tokens - 1 if n_swa and n_tokens > n_swa else 0

    def reusable(self, seq: int, n: int) -> bool:
        """May `seq`, cut to its first `n` tokens, be resumed at position n? Its cells must reach
        back as far as the window of position n (llama.cpp's SWA mask: a key at p0 is seen from
        p1 when p1 - p0 < n_swa); without a window every cell from 0 is needed. No cell at all
        (-1) fits only an empty prefix: cut back past a window cache's oldest cell, the
        sequence is empty there though its full-attention layers still hold the prefix."""
        pos_min = self.ctx.seq_pos_min(seq)
        if pos_min < 0:
            return n == 0
        if pos_min == 0:
            return True
        n_swa, _recurrent = self._memory_kind
        return bool(n_swa) and pos_min <= n - n_swa + 1

    def save_seq_file(self, seq: int, path: str, tokens: list[int]) -> int:
        return self.ctx.save_seq_file(seq, path, tokens)

    def load_seq_file(self, seq: int, path: str) -> tuple[int, list[int]]:
        return self.ctx.load_seq_file(seq, path, self.n_ctx_seq)

    def cache_identity(self) -> dict[str, str]:
        """What a saved sequence state depends on (the disk prompt cache's key): the model file,
        and the context config it was computed under."""
        import llama_cpp

        build = f"{llama_cpp.__version__} {llama_cpp.llama_print_system_info().decode(errors='replace')}"
        return {"model": str(self.model.path.resolve()), "file": self._file_identity,
                "config": f"n_ctx={self.n_ctx_seq};kv={self.cache_dtype};lora={self.ctx.adapter};build={build}"}

    @cached_property
    def _file_identity(self) -> str:
        """Size, mtime and a hash of the first MiB: a replaced file differs, and a start does
        not read gigabytes of weights to know it."""
        import hashlib

        p = self.model.path
        st = p.stat()
        with open(p, "rb") as f:
            head = hashlib.sha256(f.read(1 << 20)).hexdigest()
        return f"{st.st_size}:{st.st_mtime_ns}:{head}"

    def argmax(self, row: int) -> int:
        """The greedy token of one row (a draft model's proposal)."""
        return int(self.ctx.logits(row).argmax())

    def clear(self) -> None:
        self.ctx.clear()


def estimate_bytes(model: LlamaModel, kv_tokens: int, kv_bytes: float = 2.0) -> int:
    """Resident size: the weights file plus the KV cache (K and V, every layer, `kv_bytes` per
    element) for every slot, plus ~10% for compute buffers. An estimate for the memory budget."""
    weights = model.path.stat().st_size if model.path.is_file() else 0
    kv = 2 * kv_bytes * kv_tokens * max(1, model.n_layer) * max(1, model.n_embd_kv)
    return int((weights + kv) * 1.1)


def load_generator(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions(),
                   builtin_templates: Mapping[str, str] | None = None) -> LlamaGenerator:
    """(GENERATOR, "gguf"): `--parallel` slots (or the manifest's), `--threads` CPU threads;
    `builtin_templates` as for LlamaGenerator."""
    n_seq = int(spec.manifest.get("parallel") or opts.parallel)
    dtype = str(spec.manifest.get("cache_dtype") or opts.cache_dtype)
    mmproj = spec.manifest.get("mmproj")
    if mmproj and spec.path is not None and not Path(mmproj).is_absolute():
        base = Path(spec.path) if Path(spec.path).is_dir() else Path(spec.path).parent
        mmproj = base / mmproj
    try:
        return LlamaGenerator(spec, n_seq=n_seq, n_threads=opts.threads, n_ctx=opts.n_ctx, n_batch=opts.n_batch,
                              mmproj=Path(mmproj) if mmproj else None, cache_dtype=dtype,
                              n_gpu_layers=opts.n_gpu_layers, mmproj_threads=opts.mmproj_threads,
                              mmproj_gpu=opts.mmproj_gpu, builtin_templates=builtin_templates)
    except InvalidInput as e:
        raise ModelLoadFailed(f"model '{spec.name}' failed to load: {e.message}") from e
