"""LlamaGenerator: one loaded GGUF generator = model + multi-sequence context + the
continuous-batching engine that owns them on its worker thread.

The service talks to it through a small surface: tokenize / detokenize, `chat_template`,
`make_sampler`, `engine` (submit jobs), `set_lora`, `close`. It is also the engine's Backend
(decode, sample, KV-cache edits), whose methods only the worker thread calls."""

from __future__ import annotations

import asyncio
import logging
import os
from functools import cached_property
from pathlib import Path
from typing import Any

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.registry.discovery import model_ggufs
from inferd.registry.spec import ModelSpec
from inferd.runtimes.llama_cpp.grammar_vocab import GrammarVocabView
from inferd.runtimes.llama_cpp.context import ContextConfig, LlamaContext
from inferd.runtimes.llama_cpp.model import LlamaModel
from inferd.runtimes.llama_cpp.sampling import Sampler, token_logprob
from inferd.scheduling.generation import GenerationEngine
from inferd.types import SamplingParams, TokenLogprob

log = logging.getLogger("inferd.llama")

DEFAULT_CTX = 4096       # per sequence, when neither the manifest nor the model asks for less
DEFAULT_BATCH = 512      # tokens per decode step (next tokens + prefill chunks)


def resolve_gguf(spec: ModelSpec) -> Path:
    """The weights file of a generator spec: a .gguf file, the first weights file of a folder,
    or (built-ins) a file materialized on first load by the manifest's `materialize` hook."""
    if spec.path is None:
        hook = spec.manifest.get("materialize")
        if not hook:
            raise ModelLoadFailed(f"model '{spec.name}' has no file")
        import importlib

        module, _, fn = str(hook).partition(":")
        return Path(getattr(importlib.import_module(module), fn)())
    path = Path(spec.path)
    if path.is_dir():
        files = [p for p in model_ggufs(path) if "-of-" not in p.stem or "-00001-of-" in p.stem]
        if not files:
            raise ModelLoadFailed(f"model '{spec.name}': no .gguf weights in {path}")
        return files[0]
    return path


class LlamaGenerator:
    def __init__(self, spec: ModelSpec, n_seq: int = 4, n_threads: int | None = None,
                 n_ctx: int | None = None, n_batch: int = DEFAULT_BATCH):
        self.spec, self.name = spec, spec.name
        self.model = LlamaModel(resolve_gguf(spec))
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
                                n_threads=n_threads or os.cpu_count() or 1)
            self.ctx = LlamaContext(self.model, cfg)
        except BaseException:
            self.model.close()
            raise
        self.chat_template = self._template()
        self.bos_text = self.model.token_text(self.model.bos) if self.model.bos >= 0 else ""
        self.eos_text = self.model.token_text(self.model.eos) if self.model.eos >= 0 else ""
        self.lora: str | None = None  # the active adapter's name
        self.engine = GenerationEngine(self, name=spec.name)
        try:
            # On the worker thread, like every decode of this context: llama.cpp's OpenMP
            # builds a thread team per calling thread, and a second team (here, the loader's)
            # slowed every later decode by about a third on 2 cores.
            self.engine.call_when_idle(self._warm_up).result()
        except BaseException:
            self.close()
            raise

    def _warm_up(self) -> None:
        """One tiny decode at load: llama.cpp sizes its compute buffers on the first call,
        which would otherwise land on the first request's time to first token."""
        tok = self.model.bos if self.model.bos >= 0 else 0
        try:
            self.ctx.decode([(0, [tok], 0, True)])
        finally:
            self.ctx.clear()

    def _template(self) -> str | None:
        from inferd.chat.templates import builtin_template

        return (self.spec.manifest.get("chat_template") or self.model.chat_template
                or builtin_template(self.model.architecture))

    def close(self) -> None:
        self.engine.close()
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

    def token_bytes(self, token: int) -> bytes:
        return self.model.piece(token, special=True)

    def check_tokens(self, tokens: list[int], param: str = "prompt") -> None:
        self.model.check_tokens(tokens, param)

    def make_sampler(self, params: SamplingParams) -> Sampler:
        return Sampler(self.model, params)

    @cached_property
    def grammar_vocab(self) -> GrammarVocabView:
        """What a grammar can match in this vocabulary (checked before sampling starts)."""
        return GrammarVocabView(self.model)

    async def set_lora(self, name: str | None, path: Path | None = None, scale: float = 1.0) -> None:
        """Switch to adapter `name` at `path` (None: base weights) once the model's active
        sequences have finished; new ones wait meanwhile. The prompt cache is dropped: it
        was computed with the other weights."""
        fut = self.engine.call_when_idle(lambda: self.ctx.set_adapter(str(path) if path else None, scale))
        await asyncio.wrap_future(fut)
        self.lora = name if path else None

    # ---- Backend (worker thread only) -------------------------------------------------------
    def decode(self, entries: list[tuple[int, list[int], int, bool]]) -> list[int]:
        return self.ctx.decode(entries)

    def sample(self, sampler: Sampler, row: int) -> int:
        return sampler.sample(self.ctx.ptr, row)

    def logprob(self, row: int, token: int, top_n: int) -> TokenLogprob:
        return token_logprob(self.model, self.ctx.logits(row), token, top_n)

    def piece(self, token: int) -> bytes:
        return self.model.piece(token)

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def seq_rm(self, seq: int, p0: int, p1: int) -> bool:
        return self.ctx.seq_rm(seq, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        self.ctx.seq_cp(src, dst, p0, p1)

    def clear(self) -> None:
        self.ctx.clear()


def load_generator(spec: ModelSpec, settings: Any = None) -> LlamaGenerator:
    """LOADERS entry for (GENERATOR, "gguf"). `--parallel` slots, `--threads` CPU threads."""
    n_seq = int(spec.manifest.get("parallel") or getattr(settings, "parallel", 4) or 4)
    threads = getattr(settings, "n_threads", None) if settings is not None else None
    try:
        return LlamaGenerator(spec, n_seq=n_seq, n_threads=threads)
    except InvalidInput as e:
        raise ModelLoadFailed(f"model '{spec.name}' failed to load: {e.message}") from e
