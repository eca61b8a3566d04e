"""GGUF embedding models through llama.cpp (llama-cpp-python's Llama(embedding=True)).

Same seam as the ONNX embedders: `prepare` tokenizes (cost = token count), `run_batch` embeds
a batch in one `Llama.embed` call, which packs the sequences into llama.cpp batches itself.
Pooling comes from the manifest (`mean`, `cls`, `last`), else the GGUF's own metadata, else
(generative models, which declare none) mean pooling."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.errors import InvalidInput, ModelLoadFailed
from inferd.models import model_ggufs
from inferd.models import ModelSpec
from inferd.runtimes.common.prefixes import prefixes_of, task_prefix
from inferd.runtimes.common.pooling import l2_normalize
from inferd.runtimes.options import RuntimeOptions

log = logging.getLogger("inferd.runtimes.gguf")


@dataclass(frozen=True)
class GgufItem:
    text: str
    n_tokens: int
    truncated: bool

    def __len__(self) -> int:
        return self.n_tokens


def gguf_file(spec: ModelSpec) -> Path:
    """The model's .gguf: the spec's file, or the first model GGUF in its folder."""
    path = Path(spec.path) if spec.path else None
    if path is not None and path.is_dir():
        files = model_ggufs(path)
        path = files[0] if files else None
    if path is None or not path.is_file():
        raise ModelLoadFailed(f"model '{spec.name}': no .gguf file")
    return path


class GgufEmbedder:
    sparse = False
    max_batch_tokens: int | None = None

    def __init__(self, spec: ModelSpec, opts: RuntimeOptions):
        import llama_cpp

        path = gguf_file(spec)
        self.spec, self.manifest = spec, dict(spec.manifest or {})
        pooling = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN, "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
                   "last": llama_cpp.LLAMA_POOLING_TYPE_LAST}.get(str(self.manifest.get("pooling", "")),
                                                                 llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED)
        threads = opts.threads
        n_ctx = int(self.manifest.get("max_length", 0) or 512)
        def open_(pooling_type: int) -> Any:
            return llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=n_ctx, n_batch=n_ctx,
                                   n_ubatch=n_ctx, pooling_type=pooling_type, n_threads=threads,
                                   n_threads_batch=threads, verbose=False)

        self.llm = open_(pooling)
        if self.llm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_NONE:
            # A generative GGUF declares no pooling: embed it by mean pooling, as documented.
            self.llm.close()
            self.llm = open_(llama_cpp.LLAMA_POOLING_TYPE_MEAN)
        self.max_length = n_ctx
        self.dims = int(self.llm.n_embd())
        self.normalize = bool(self.manifest.get("normalize", True))
        self.prefixes = prefixes_of(self.manifest)
        self.graph_path = str(path)

    def prefix(self, task: str | None) -> str:
        return task_prefix(self.prefixes, task)

    def _item(self, text: str) -> GgufItem:
        n = len(self.llm.tokenize(text.encode("utf-8"), add_bos=True))
        return GgufItem(text, min(n, self.max_length), n > self.max_length)

    def prepare(self, texts: Sequence[str], task: str | None = None) -> list[GgufItem]:
        p = self.prefix(task)
        return [self._item(p + t) for t in texts]

    def prepare_ids(self, ids: Sequence[int]) -> GgufItem:
        vocab = self.llm.n_vocab()
        bad = [i for i in ids if not 0 <= int(i) < vocab]
        if bad:
            raise InvalidInput(f"token id {bad[0]} is outside the model's vocabulary (0..{vocab - 1})", "input")
        # Llama.embed takes text: token ids go through the model's own detokenizer.
        return self._item(self.llm.detokenize([int(i) for i in ids]).decode("utf-8", errors="replace"))

    def run_batch(self, items: Sequence[GgufItem]) -> list[np.ndarray]:
        vecs = np.asarray(self.llm.embed([it.text for it in items], normalize=False, truncate=True), np.float32)
        return list(l2_normalize(vecs) if self.normalize else vecs)

    def close(self) -> None:
        self.llm.close()


def load_embedder(spec: ModelSpec, opts: RuntimeOptions = RuntimeOptions()) -> GgufEmbedder:
    return GgufEmbedder(spec, opts)
