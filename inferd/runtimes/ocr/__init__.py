"""OCR runtimes: PP-OCR detection + recognition (ppocr.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from inferd.errors import ModelLoadFailed
from inferd.models import ModelSpec
from inferd.runtimes.options import RuntimeOptions

if TYPE_CHECKING:
    from inferd.runtimes.ocr.ppocr import PPOCR


def load(spec: ModelSpec, opts: RuntimeOptions) -> "PPOCR":
    """A PP-OCR reader: the built-in's model paths from its manifest, else the folder's
    `*det*.onnx`, `*rec*.onnx`, `*cls*.onnx` (and `*.txt` character list)."""
    from inferd.runtimes.ocr.ppocr import PPOCR, folder_models

    if spec.path is None:
        raise ModelLoadFailed(f"reader '{spec.name}' has no model folder")
    models = spec.manifest.get("models")
    files = {k: Path(v) for k, v in models.items()} if isinstance(models, dict) else folder_models(Path(spec.path))
    return PPOCR(spec.name, files, threads=opts.threads)
