"""Embedders: ONNX (runtimes/onnx; a vision graph beside the text graph makes a CLIP-style
dual encoder, runtimes/onnx/clip.py), safetensors through the same ONNX runtime, or GGUF on
llama.cpp's embedding mode (runtimes/gguf_embed.py); every one behind a dynamic batcher.
A masked-LM architecture is a sparse (SPLADE-style) embedder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.kinds.spec import KindSpec, architectures, batched, declared, folder_of, lazy
from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import EncoderHandle, EmbedderRuntime

_text = batched(lazy("inferd.runtimes.onnx", "load_embedder"))
_clip = batched(lazy("inferd.runtimes.onnx.clip", "load"))
_DUAL = ("vision_model.onnx", "onnx/vision_model.onnx")


def load_onnx(spec: ModelSpec, opts: RuntimeOptions) -> EncoderHandle[Any]:
    """A dual encoder's batcher takes texts and images; a text embedder's, texts."""
    return (_clip if "image" in spec.capabilities else _text)(spec, opts)


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    caps = set()
    folder = folder_of(path)
    if any("MaskedLM" in a for a in architectures(folder)):
        caps.add("sparse")
    if "sparse" not in caps | declared(manifest):
        caps.add("dense")
    if path.is_dir() and any((folder / f).is_file() for f in _DUAL):  # CLIP-style: texts and images
        caps.add("image")
    return caps


EMBEDDER: KindSpec[EncoderHandle[EmbedderRuntime]] = KindSpec(
    ModelKind.EMBEDDER,
    {"onnx": load_onnx, "safetensors": _text, "gguf": batched(lazy("inferd.runtimes.gguf_embed", "load_embedder"))},
    folder="embedders", capabilities=capabilities, pipeline_tags=("feature-extraction", "sentence-similarity"),
    pull_formats=("gguf", "onnx"), faces=frozenset({"openai", "ollama", "antfly"}), observe="batch")
