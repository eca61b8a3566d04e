"""What kind of reader a `readers/<name>/` folder holds, from its files alone (nothing is
loaded): a PP-OCR det+rec pair, a vision encoder-decoder in the optimum ONNX layout (TrOCR,
Donut), or an architecture inferd has no runtime for (Florence-2, Moondream, Pix2Struct),
which is still listed, with the reason, and refused with a 400 naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# config.json model_type / architecture markers of readers with no runtime in inferd
UNSUPPORTED = {"florence": "Florence-2", "moondream": "Moondream", "pix2struct": "Pix2Struct",
               "nougat": "Nougat", "got_ocr": "GOT-OCR", "paligemma": "PaliGemma"}
CAPABILITIES = {"ppocr": {"ocr", "regions"}, "trocr": {"ocr"}, "donut": {"ocr", "document", "fields", "prompt"}}


def _config(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "config.json").read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def reader_info(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """{"reader": family} for a served reader, plus {"unsupported": reason} for one inferd
    cannot run. A manifest's "reader" ("ppocr", "trocr", "donut") wins over detection."""
    folder = path if path.is_dir() else path.parent
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


def reader_capabilities(info: dict[str, Any]) -> set[str]:
    if info.get("unsupported"):
        return {"unsupported"}
    return set(CAPABILITIES.get(info.get("reader", ""), set()))
