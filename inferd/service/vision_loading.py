"""Loaders of image models (registered in inferd/runtimes/__init__.py): readers (PP-OCR,
TrOCR, Donut) and image embedders (CLIP-style dual encoders). Each builds the leaf runtime
(inferd/runtimes/ocr, inferd/runtimes/onnx/vision_seq2seq.py, onnx/clip.py) and attaches
its dynamic batcher, which owns the model's worker thread and lets concurrent requests
share batches of images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferd.errors import ModelNotSupported
from inferd.registry.spec import ModelSpec
from inferd.scheduling.batcher import Batcher

READ_BATCH_IMAGES = 8  # images per reader batch (one encoder pass / one recognition round)


def _threads(settings: Any) -> int | None:
    if settings is None:
        return None
    return getattr(settings, "threads", None) or settings.n_threads


def load_reader(spec: ModelSpec, settings: Any = None) -> Any:
    reason = spec.manifest.get("unsupported")
    if reason:
        raise ModelNotSupported(f"reader '{spec.name}': {reason}")
    family = spec.manifest.get("reader")
    threads = _threads(settings)
    if family == "ppocr":
        from inferd.runtimes.ocr.ppocr import PPOCR, folder_models

        models = spec.manifest.get("models")
        files = {k: Path(v) for k, v in models.items()} if isinstance(models, dict) else folder_models(spec.path)
        rt: Any = PPOCR(spec.name, files, threads=threads)
    elif family in ("trocr", "donut"):
        from inferd.runtimes.onnx.vision_seq2seq import VisionSeq2Seq

        rt = VisionSeq2Seq(spec.name, Path(spec.path), threads=threads)
    else:
        raise ModelNotSupported(f"reader '{spec.name}': no runtime for reader family {family!r}")
    images = min(READ_BATCH_IMAGES, int(getattr(settings, "max_batch_size", READ_BATCH_IMAGES) or 1))
    rt.batcher = Batcher(rt.run_batch, max_tokens=images, max_items=images, name=spec.name)
    return rt


def load_image_embedder(spec: ModelSpec, settings: Any = None) -> Any:
    """A CLIP-style embedder: texts and images in one space; the batcher takes both."""
    from inferd.runtimes.onnx.clip import ClipEmbedder

    folder = Path(spec.path) if Path(spec.path).is_dir() else Path(spec.path).parent
    rt = ClipEmbedder(spec.name, folder, spec.manifest, threads=_threads(settings))
    rt.batcher = Batcher(rt.run_batch, max_tokens=int(getattr(settings, "max_batch_tokens", 8192)),
                         max_items=int(getattr(settings, "max_batch_size", 512)), name=spec.name)
    return rt
