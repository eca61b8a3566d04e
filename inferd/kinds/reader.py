"""Readers (OCR and document understanding): a PP-OCR det+rec pair (runtimes/ocr) or a
vision encoder-decoder in the optimum ONNX layout, TrOCR or Donut
(runtimes/onnx/vision_seq2seq.py), batched by images. Which one a `readers/<name>/` folder
holds is read from its files alone; an architecture inferd has no runtime for (Florence-2,
Moondream, Pix2Struct) is still listed, with the reason, and refused with a 400 naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelNotSupported
from inferd.kinds.spec import KindSpec, batched, folder_of, lazy
from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import EncoderHandle, ReaderRuntime

# config.json model_type / architecture markers of readers with no runtime in inferd
UNSUPPORTED = {"florence": "Florence-2", "moondream": "Moondream", "pix2struct": "Pix2Struct",
               "nougat": "Nougat", "got_ocr": "GOT-OCR", "paligemma": "PaliGemma"}
CAPABILITIES = {"ppocr": {"ocr", "regions"}, "trocr": {"ocr"}, "donut": {"ocr", "document", "fields", "prompt"}}
_RUNTIMES = {"ppocr": batched(lazy("inferd.runtimes.ocr", "load")),
             "trocr": batched(lazy("inferd.runtimes.onnx.vision_seq2seq", "load")),
             "donut": batched(lazy("inferd.runtimes.onnx.vision_seq2seq", "load"))}


def load(spec: ModelSpec, opts: RuntimeOptions) -> EncoderHandle[Any]:
    """The reader family's runtime (reader_info says which); a folder of an architecture with
    no runtime (Florence-2, ...) is refused with its reason."""
    reason = spec.manifest.get("unsupported")
    if reason:
        raise ModelNotSupported(f"reader '{spec.name}': {reason}")
    family = spec.manifest.get("reader")
    if family not in _RUNTIMES:
        raise ModelNotSupported(f"reader '{spec.name}': no runtime for reader family {family!r}")
    return _RUNTIMES[family](spec, opts)


def _config(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "config.json").read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def reader_info(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """{"reader": family} for a served reader, plus {"unsupported": reason} for one inferd
    cannot run. A manifest's "reader" ("ppocr", "trocr", "donut") wins over detection."""
    folder = folder_of(path)
    cfg = _config(folder)
    words = " ".join([str(cfg.get("model_type", "")), *map(str, cfg.get("architectures") or []),
                      str(manifest.get("architecture", "")), str(manifest.get("family", ""))]).lower()
    for marker, arch in UNSUPPORTED.items():
        if marker in words.replace("-", "").replace("_", "") or marker in words:
            return {"reader": arch.lower(), "unsupported": f"unsupported architecture {arch}: inferd has no "
                                                         f"{arch} runtime (readers run PP-OCR, TrOCR and Donut)"}
    want = manifest.get("reader")
    if want in CAPABILITIES:
        return {"reader": want}
    if cfg.get("model_type") == "vision-encoder-decoder" or (folder / "encoder_model.onnx").is_file() \
            or (folder / "onnx" / "encoder_model.onnx").is_file():
        enc = (cfg.get("encoder") or {}).get("model_type")
        return {"reader": "donut" if enc == "donut-swin" else "trocr"}
    names = [p.name.lower() for p in [*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")]]
    if any("det" in n for n in names) and any("rec" in n for n in names):
        return {"reader": "ppocr"}
    kind = cfg.get("model_type") or (cfg.get("architectures") or ["?"])[0]
    return {"reader": "unknown", "unsupported": f"unsupported architecture {kind}: not a PP-OCR det+rec pair "
                                                "nor a vision encoder-decoder ONNX export"}


def describe(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    return {**manifest, **reader_info(path, manifest)}


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    if manifest.get("unsupported"):
        return {"unsupported"}
    return set(CAPABILITIES.get(manifest.get("reader", ""), set()))


READER: KindSpec[EncoderHandle[ReaderRuntime]] = KindSpec(
    ModelKind.READER, {"onnx": load, "safetensors": load, "transformers": load}, folder="readers",
    architectures=("VisionEncoderDecoder",), describe=describe, capabilities=capabilities,
    unreadable_format="transformers", pipeline_tags=("image-to-text",), inputs=("image",),
    observe="batch")
