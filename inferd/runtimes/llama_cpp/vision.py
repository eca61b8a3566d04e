"""Images in prompts through llama.cpp's multimodal library (mtmd): a projector (`mmproj-*.gguf`)
beside a generator turns an image into embeddings the text model reads.

`Projector.tokenize` splits a rendered prompt at its media markers into text tokens and image
chunks; each image becomes a span of placeholder ids (negative, derived from the image's
sha256, never a real token id) so the engine's prefix cache recognises the same image in a
later turn. `encode` runs on the generation worker (mtmd contexts are not thread-safe; the
engine calls it between steps) and returns the image's embeddings."""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.runtimes.llama_cpp.model import _LOG_CB, LlamaModel
from inferd.types import Image

log = logging.getLogger("inferd.llama")

_IMAGE = 1  # MTMD_INPUT_CHUNK_TYPE_IMAGE


@dataclass(eq=False)
class ImageChunk:
    """One image of a prompt, tokenized by mtmd and not yet encoded. Owns a native chunk."""

    ptr: int
    n_tokens: int
    digest: str
    non_causal: bool
    _freed: bool = field(default=False, repr=False)

    def close(self) -> None:
        from llama_cpp import mtmd_cpp as M

        if not self._freed:
            self._freed = True
            M.mtmd_input_chunk_free(self.ptr)


_quiet_once: list[bool] = []


def _quiet_mtmd() -> None:
    """mtmd logs through its own hook: send it to the same callback as llama.cpp (errors only)."""
    from llama_cpp import mtmd_cpp as M

    if not _quiet_once:
        M.mtmd_log_set(_LOG_CB, ctypes.c_void_p(0))
        M.mtmd_helper_log_set(_LOG_CB, ctypes.c_void_p(0))
        _quiet_once.append(True)


def placeholders(digest: str, n: int) -> list[int]:
    """The span of ids that stands for an image in the prompt: negative, unique per image."""
    base = int(digest[:12], 16) << 16
    return [-(1 + base + j) for j in range(n)]


class Projector:
    def __init__(self, path: Path, model: LlamaModel, n_threads: int, use_gpu: bool = False):
        from llama_cpp import mtmd_cpp as M

        self.M, self.path, self.model = M, Path(path), model
        _quiet_mtmd()
        p = M.mtmd_context_params_default()
        p.use_gpu = use_gpu
        p.n_threads = n_threads
        self.n_threads, self.use_gpu = n_threads, use_gpu
        p.print_timings = False
        p.warmup = False
        ctx = M.mtmd_init_from_file(str(self.path).encode(), model.ptr, p)
        if not ctx:
            raise ModelLoadFailed(f"llama.cpp could not load the projector {self.path} for {model.path} "
                                  "(not an mmproj GGUF of this model?)")
        self.ctx = ctx
        if not M.mtmd_support_vision(ctx):
            M.mtmd_free(ctx)
            raise ModelLoadFailed(f"{self.path} is not a vision projector")
        if M.mtmd_decode_use_mrope(ctx):
            M.mtmd_free(ctx)
            raise ModelLoadFailed(f"{self.path}: projectors with M-RoPE image positions (Qwen2-VL family) "
                                  "are not supported yet")
        self.marker = M.mtmd_default_marker().decode()
        self.n_embd = model.n_embd
        self._lock = threading.Lock()  # tokenize runs on request threads; encode on the worker

    def close(self) -> None:
        if self.ctx:
            self.M.mtmd_free(self.ctx)
            self.ctx = None

    def tokenize(self, text: str, images: list[Image], add_special: bool) -> tuple[list[int], dict[int, ImageChunk]]:
        """Prompt ids (images as placeholder spans) and span start -> image chunk. `text` holds
        one marker per image, in order."""
        M = self.M
        if text.count(self.marker) != len(images):
            raise InvalidInput(f"the prompt has {text.count(self.marker)} image markers for {len(images)} images")
        bitmaps = []
        for im in images:
            buf = (ctypes.c_uint8 * len(im.rgb)).from_buffer_copy(im.rgb)
            bmp = M.mtmd_bitmap_init(im.width, im.height, buf)
            if not bmp:
                raise InvalidInput(f"llama.cpp could not take a {im.width}x{im.height} image")
            M.mtmd_bitmap_set_id(bmp, im.digest.encode())
            bitmaps.append(bmp)
        raw = text.encode("utf-8")
        chunks = M.mtmd_input_chunks_init()
        try:
            t = M.mtmd_input_text(raw, len(raw), add_special, True)
            arr = (M.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            with self._lock:
                rc = M.mtmd_tokenize(self.ctx, chunks, ctypes.byref(t), arr, len(bitmaps))
            if rc != 0:
                raise InvalidInput(f"llama.cpp could not tokenize the images of this prompt (code {rc})")
            ids: list[int] = []
            media: dict[int, ImageChunk] = {}
            for i in range(M.mtmd_input_chunks_size(chunks)):
                ch = M.mtmd_input_chunks_get(chunks, i)
                if M.mtmd_input_chunk_get_type(ch) == _IMAGE:
                    n = M.mtmd_input_chunk_get_n_tokens(ch)
                    digest = (M.mtmd_input_chunk_get_id(ch) or b"").decode()
                    media[len(ids)] = ImageChunk(M.mtmd_input_chunk_copy(ch), n, digest,
                                                 bool(M.mtmd_decode_use_non_causal(self.ctx, ch)))
                    ids.extend(placeholders(digest, n))
                else:
                    size = ctypes.c_size_t()
                    p = M.mtmd_input_chunk_get_tokens_text(ch, ctypes.byref(size))
                    ids.extend(int(p[j]) for j in range(size.value))
            return ids, media
        except BaseException:
            for c in locals().get("media", {}).values():
                c.close()
            raise
        finally:
            M.mtmd_input_chunks_free(chunks)
            for bmp in bitmaps:
                M.mtmd_bitmap_free(bmp)

    def encode(self, chunk: ImageChunk) -> np.ndarray:
        """The image's embeddings, [n_tokens, n_embd] float32 (worker thread)."""
        with self._lock:
            rc = self.M.mtmd_encode_chunk(self.ctx, chunk.ptr)
            if rc != 0:
                raise InvalidInput(f"llama.cpp could not encode an image (code {rc})")
            out = self.M.mtmd_get_output_embd(self.ctx)
            return np.ctypeslib.as_array(out, shape=(chunk.n_tokens * self.n_embd,)).reshape(
                chunk.n_tokens, self.n_embd).copy()
