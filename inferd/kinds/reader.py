"""Readers (OCR and document understanding): a PP-OCR det+rec pair (runtimes/ocr) or a
vision encoder-decoder in the optimum ONNX layout, TrOCR or Donut
(runtimes/onnx/vision_seq2seq.py), or Florence-2 in onnx-community's ONNX layout
(runtimes/onnx/florence2.py), or Pix2Struct in optimum's (runtimes/onnx/pix2struct.py),
batched by images. Which one a `readers/<name>/` folder holds is read from its files alone;
an architecture inferd has no runtime for (Moondream, Nougat, ...), or Florence-2 / Pix2Struct
without their ONNX export, is still listed, with the reason, and refused with a 400 naming it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelNotSupported
from inferd.kinds.spec import KindSpec, batched, config_of, folder_of, has_file, lazy
from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import EncoderHandle, ReaderRuntime

# config.json model_type / architecture markers of readers with no runtime in inferd
UNSUPPORTED = {"moondream": "Moondream",
               "nougat": "Nougat", "got_ocr": "GOT-OCR", "paligemma": "PaliGemma"}
# Why each is refused, measured (docs/readers-florence-pix2struct.md): the 400 carries it.
WHY = {
    "Moondream": "transformers 5.24.0 has no Moondream model (AutoConfig.for_model('moondream1') raises "
                 "'Unrecognized model identifier'); the hub's moondream2 runs only as trust_remote_code, so "
                 "there is no reference library to check a runtime of its ONNX export (Xenova/moondream2) against",
}
# Florence-2 and Pix2Struct run from their ONNX exports only; a folder without one is refused
# with what is missing (config.json marker, display name, graphs it needs, where exports live).
EXPORTS = {"florence": ("florence2", "Florence-2", ("vision_encoder.onnx", "embed_tokens.onnx", "encoder_model.onnx"),
                        "onnx-community/Florence-2-* ships the layout"),
           "pix2struct": ("pix2struct", "Pix2Struct", ("encoder_model.onnx",),
                          "optimum-cli export onnx --model google/pix2struct-docvqa-base writes it")}
DECODERS = (("decoder_model_merged.onnx",), ("decoder_model.onnx", "decoder_with_past_model.onnx"))
CAPABILITIES = {"ppocr": {"ocr", "regions"}, "trocr": {"ocr"}, "donut": {"ocr", "document", "fields", "prompt"},
                "florence2": {"ocr", "regions", "caption", "detection", "prompt"},
                "pix2struct": {"ocr", "document", "prompt"}}
_RUNTIMES = {"ppocr": batched(lazy("inferd.runtimes.ocr", "load")),
             "trocr": batched(lazy("inferd.runtimes.onnx.vision_seq2seq", "load")),
             "donut": batched(lazy("inferd.runtimes.onnx.vision_seq2seq", "load")),
             "florence2": batched(lazy("inferd.runtimes.onnx.florence2", "load")),
             "pix2struct": batched(lazy("inferd.runtimes.onnx.pix2struct", "load"))}


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


def reader_info(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """{"reader": family} for a served reader, plus {"unsupported": reason} for one inferd
    cannot run. A manifest's "reader" ("ppocr", "trocr", "donut") wins over detection, except
    for the architectures named in config.json."""
    folder = folder_of(path)
    cfg = config_of(folder)
    words = " ".join([str(cfg.get("model_type", "")), *map(str, cfg.get("architectures") or []),
                      str(manifest.get("architecture", "")), str(manifest.get("family", ""))]).lower()
    for marker, (family, arch, graphs, where) in EXPORTS.items():
        if marker in words:
            missing = [f for f in graphs if not has_file(folder, f)]
            if not any(all(has_file(folder, f) for f in pair) for pair in DECODERS):
                missing.append("decoder_model_merged.onnx (or decoder_model.onnx + decoder_with_past_model.onnx)")
            if missing:
                return {"reader": family, "unsupported": f"unsupported architecture {arch} in this layout: inferd "
                        f"runs {arch} from its ONNX export, and {', '.join(missing)} is missing ({where})"}
            return {"reader": family}
    for marker, arch in UNSUPPORTED.items():
        if marker in words.replace("-", "").replace("_", "") or marker in words:
            why = WHY.get(arch, f"inferd has no {arch} runtime")
            return {"reader": arch.lower(), "unsupported": f"unsupported architecture {arch}: {why} "
                                                         "(readers run PP-OCR, TrOCR, Donut, Florence-2 and "
                                                         "Pix2Struct)"}
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
