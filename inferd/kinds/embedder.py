"""Embedders: ONNX (runtimes/onnx; a vision graph beside the text graph makes a CLIP-style
dual encoder, runtimes/onnx/clip.py), safetensors through the same ONNX runtime, or GGUF on
llama.cpp's embedding mode (runtimes/gguf_embed.py); every one behind a dynamic batcher.
A masked-LM architecture is a sparse (SPLADE-style) embedder."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.kinds.spec import KindSpec, architectures, batched, declared, folder_of, lazy
from inferd.models import ModelKind, ModelSpec, onnx_files

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


I8 = "-i8"  # the suffix the spec's catalog gives quantized variants


def variants(spec: ModelSpec) -> list[ModelSpec]:
    """An ONNX embedder folder with both a float graph (model.onnx) and an int8 one
    (model_quantized.onnx, *_int8.onnx, ...: runtimes/onnx/files.py) is served twice, as the
    spec's catalog shows: `<name>` loads the float graph, `<name>-i8` the int8 one, each pinned
    by `onnx_file` (so --no-prefer-quantized no longer matters for it). A manifest that names
    its onnx_file or says `"quantized": false`, and a dual (CLIP-style) encoder, keep one."""
    m = spec.manifest
    if (spec.format != "onnx" or spec.path is None or not spec.path.is_dir() or m.get("onnx_file")
            or m.get("quantized") is False or "image" in spec.capabilities):
        return [spec]
    from inferd.runtimes.onnx.files import is_quantized, pick_graph  # file names only: no runtime

    folder = spec.path
    graphs = onnx_files(folder)
    if not graphs:
        return [spec]
    plain, quant = pick_graph(graphs, {}, prefer_quantized=False), pick_graph(graphs, {}, prefer_quantized=True)
    if is_quantized(plain) or not is_quantized(quant):
        return [spec]

    def pinned(name: str, graph: Path, other: Path, extra: dict[str, Any]) -> ModelSpec:
        return dataclasses.replace(spec, name=name, size_bytes=max(0, spec.size_bytes - other.stat().st_size),
                                   manifest={**m, "onnx_file": graph.relative_to(folder).as_posix(), **extra})

    return [pinned(spec.name, plain, quant, {}),
            pinned(spec.name + I8, quant, plain, {"quantization": "int8", "variant_of": spec.name})]


EMBEDDER: KindSpec[EncoderHandle[EmbedderRuntime]] = KindSpec(
    ModelKind.EMBEDDER,
    {"onnx": load_onnx, "safetensors": _text, "gguf": batched(lazy("inferd.runtimes.gguf_embed", "load_embedder"))},
    folder="embedders", capabilities=capabilities, variants=variants, pipeline_tags=("feature-extraction", "sentence-similarity"),
    pull_formats=("gguf", "onnx"), faces=frozenset({"openai", "ollama", "antfly"}), observe="batch")
