"""A loaded GGUF model: weights, vocabulary, metadata, tokenize / detokenize.

Everything here is read-only once loaded, so any thread may tokenize while the worker
thread decodes (llama.cpp's vocabulary is immutable; ctypes releases the GIL)."""

from __future__ import annotations

import concurrent.futures
import ctypes
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import llama_cpp as L

from inferd.errors import InvalidInput, ModelLoadFailed

log = logging.getLogger("inferd.llama")

_backend_once = threading.Lock()
_backend_ready = False


_GGML_LOG_LEVEL_ERROR = 4  # ggml.h: NONE, DEBUG, INFO, WARN, ERROR, CONT


def _quiet_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp prints its load chatter to stderr; keep errors, forward to our logger.
    if level == _GGML_LOG_LEVEL_ERROR and text:
        log.error("llama.cpp: %s", text.decode("utf-8", "replace").rstrip())


_LOG_CB = L.llama_log_callback(_quiet_log)  # must outlive every llama.cpp call


def init_backend() -> None:
    global _backend_ready
    with _backend_once:
        if not _backend_ready:
            L.llama_backend_init()
            L.llama_log_set(_LOG_CB, ctypes.c_void_p(0))
            _backend_ready = True


# ---- prefetch: llama.cpp's parse of a GGUF begun before the server has finished starting ------
@dataclass
class _Prefetch:
    n_gpu_layers: int
    path: concurrent.futures.Future[Path] = field(default_factory=concurrent.futures.Future)
    model: concurrent.futures.Future[LlamaModel] = field(default_factory=concurrent.futures.Future)


_prefetches: list[_Prefetch] = []
_prefetch_lock = threading.Lock()


def prefetch(locate: Callable[[], Path], n_gpu_layers: int = 0) -> None:
    """Begin a LlamaModel on a thread now (`inferd serve --preload`, while the rest of inferd
    is still being imported): llama.cpp's vocabulary and tensor set-up are most of a small
    model's load (gemma 3's 262k tokens: ~0.5 s of native code, the GIL released).
    `locate()` runs on that thread and returns the file, self-checked (the weights are
    touched next), or raises to give up. Registered before this returns, so an `open_model`
    of the same file, however soon, takes it; `drop_prefetched` frees one nobody takes."""
    job = _Prefetch(n_gpu_layers)
    with _prefetch_lock:
        _prefetches.append(job)

    def run() -> None:
        try:
            job.path.set_result(locate())
        except BaseException as e:  # noqa: BLE001 (nothing prefetched: open_model loads)
            job.path.set_exception(e)
            return
        try:
            job.model.set_result(LlamaModel(job.path.result(), n_gpu_layers))
        except BaseException as e:  # noqa: BLE001 (open_model loads again and reports it)
            job.model.set_exception(e)
    threading.Thread(target=run, name="prefetch", daemon=True).start()


def open_model(path: Path, n_gpu_layers: int = 0) -> LlamaModel:
    """The prefetched model of this file (waiting for it), else a new load."""
    with _prefetch_lock:
        jobs = list(_prefetches)
    for job in jobs:
        if job.path.exception() is not None:  # nothing was prefetched: forget it
            with _prefetch_lock:
                if job in _prefetches:
                    _prefetches.remove(job)
            continue
        if job.n_gpu_layers != n_gpu_layers or job.path.result() != Path(path):
            continue
        with _prefetch_lock:
            if job not in _prefetches:
                continue  # another load took it
            _prefetches.remove(job)
        if job.model.exception() is None:
            return job.model.result()
    return LlamaModel(path, n_gpu_layers)


def drop_prefetched() -> None:
    """Free every prefetched model nobody took (once each is ready)."""
    with _prefetch_lock:
        jobs = list(_prefetches)
        _prefetches.clear()
    def close(f: concurrent.futures.Future[LlamaModel]) -> None:
        if f.exception() is None:
            f.result().close()
    for job in jobs:
        job.model.add_done_callback(close)


class LlamaModel:
    """Weights + vocabulary of one GGUF file (no context: see context.py)."""

    def __init__(self, path: Path, n_gpu_layers: int = 0):
        init_backend()
        self.path = Path(path)
        params = L.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers  # a CPU build has no device to offload to: all stay here
        model = L.llama_model_load_from_file(str(self.path).encode(), params)
        if not model:
            raise ModelLoadFailed(f"llama.cpp could not load {self.path} (not a valid GGUF model?)")
        self.ptr = model
        self.vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = L.llama_model_n_ctx_train(model)
        self.bos = L.llama_vocab_bos(self.vocab)
        self.eos = L.llama_vocab_eos(self.vocab)
        self.add_bos = bool(L.llama_vocab_get_add_bos(self.vocab))
        # For the KV-cache size estimate: K and V hold n_head_kv * head_dim values per layer.
        self.n_layer = int(L.llama_model_n_layer(model))
        self.n_embd = int(L.llama_model_n_embd(model))
        n_head = max(1, int(L.llama_model_n_head(model)))
        self.n_embd_kv = int(L.llama_model_n_embd(model)) * int(L.llama_model_n_head_kv(model)) // n_head
        self._piece_cache: dict[int, bytes] = {}

    def close(self) -> None:
        if self.ptr:
            L.llama_model_free(self.ptr)
            self.ptr = None

    # ---- metadata ---------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(256)
        n = L.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):  # long values (chat templates): ask again with room for all of it
            buf = ctypes.create_string_buffer(n + 1)
            L.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    @cached_property
    def architecture(self) -> str:
        return self.meta("general.architecture") or ""

    @cached_property
    def chat_template(self) -> str | None:
        raw = L.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", "replace") if raw else None

    @cached_property
    def eog_tokens(self) -> frozenset[int]:
        """Every end-of-generation token (eos, eot, <end_of_turn>, ...). Scanned once."""
        return frozenset(t for t in range(self.n_vocab) if L.llama_vocab_is_eog(self.vocab, t))

    def is_eog(self, token: int) -> bool:
        return bool(L.llama_vocab_is_eog(self.vocab, token))

    @cached_property
    def fim_tokens(self) -> dict[str, int]:
        """The fill-in-the-middle tokens the GGUF names (tokenizer.ggml.fim_*_token_id, or
        those llama.cpp recognises by their text): pre, suf, mid, pad, rep, sep; -1 where absent."""
        get = {"pre": L.llama_vocab_fim_pre, "suf": L.llama_vocab_fim_suf, "mid": L.llama_vocab_fim_mid,
               "pad": L.llama_vocab_fim_pad, "rep": L.llama_vocab_fim_rep, "sep": L.llama_vocab_fim_sep}
        return {k: int(f(self.vocab)) for k, f in get.items()}

    def token_text(self, token: int) -> str:
        """The vocabulary entry itself (special tokens as written), for templates and logs."""
        return self.piece(token, special=True).decode("utf-8", "replace")

    # ---- tokens <-> text --------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:  # JSON "\ud800": a lone surrogate has no UTF-8 form
            raise InvalidInput(f"the text holds a lone surrogate (U+{ord(e.object[e.start]):04X} at character "
                               f"{e.start}), which is not valid Unicode") from None
        cap = len(data) + 8
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise InvalidInput("text could not be tokenized")
        return list(buf[:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes one token contributes to the output (special tokens empty unless `special`)."""
        key = token if not special else -1 - token
        hit = self._piece_cache.get(key)
        if hit is not None:
            return hit
        buf = ctypes.create_string_buffer(64)
        n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        out = buf.raw[:n]
        self._piece_cache[key] = out
        return out

    @cached_property
    def add_space_prefix(self) -> bool:
        """SentencePiece vocabularies that put a space before the text when tokenizing."""
        return (self.meta("tokenizer.ggml.add_space_prefix") or "").lower() == "true"

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        """The tokens' pieces joined exactly, so detokenize(tokenize(x)) == x. Not
        llama_detokenize: for vocabularies with `clean_spaces` it rewrites " ?" as "?" and
        " , " as ", ", which is not the text that was tokenized. The only edit kept is the
        one tokenizing made: the space a SentencePiece vocabulary put before the text."""
        self.check_tokens(tokens)
        data = b"".join(self.piece(t, special) for t in tokens)
        if self.add_space_prefix:
            first = next((self.piece(t, special) for t in tokens if self.piece(t, special)), b"")
            if first.startswith(b" "):
                data = data[1:]
        return data.decode("utf-8", "replace")

    def check_tokens(self, tokens: list[int], param: str = "tokens") -> None:
        bad = [t for t in tokens if not isinstance(t, int) or t < 0 or t >= self.n_vocab]
        if bad:
            raise InvalidInput(f"token id {bad[0]} is out of range for this model (vocabulary of "
                               f"{self.n_vocab})", param)


def read_chat_template(path: Path) -> tuple[str | None, str]:
    """(tokenizer.chat_template, general.architecture) of a GGUF file, read with the
    vocabulary only (no weights, milliseconds): for catalogs that must not load a model."""
    init_backend()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ModelLoadFailed(f"llama.cpp could not read {path} (not a valid GGUF model?)")
    try:
        raw = L.llama_model_chat_template(model, None)
        buf = ctypes.create_string_buffer(64)
        n = L.llama_model_meta_val_str(model, b"general.architecture", buf, len(buf))
        return (raw.decode("utf-8", "replace") if raw else None), (buf.value.decode() if n >= 0 else "")
    finally:
        L.llama_model_free(model)
