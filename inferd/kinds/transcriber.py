"""Transcribers (speech to text): Whisper as a CTranslate2 folder (faster-whisper), Whisper
exported to ONNX in optimum's layout, or a CTC model as an ONNX folder (runtimes/speech),
behind a queue that batches the 30 s windows of concurrent requests (scheduling/speech.py).
A multilingual Whisper also translates.

An ONNX folder is told apart at discovery (`describe`): encoder_model.onnx or a Whisper
config.json is a Whisper export, model.onnx a CTC model; a folder that is neither, or a
Whisper export that lacks a file, is listed with its reason and refused on load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelLoadFailed, ModelNotSupported
from inferd.kinds.spec import KindSpec, config_of, file_size, folder_of, has_file
from inferd.models import ModelKind, ModelSpec, onnx_files

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import TranscriberHandle


def load(spec: ModelSpec, opts: RuntimeOptions) -> TranscriberHandle:
    from inferd.runtimes import speech
    from inferd.scheduling.speech import SpeechQueue
    from inferd.service.handles import TranscriberHandle

    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    if spec.manifest.get("unsupported"):
        raise ModelNotSupported(f"transcriber '{spec.name}': {spec.manifest['unsupported']}")
    if spec.format == "ctranslate2":
        rt = speech.load_whisper(spec.path, threads=opts.threads, name=spec.name,
                                 compute_type=str(spec.manifest.get("compute_type") or "default"))
    elif spec.manifest.get("transcriber") == "whisper-onnx":
        rt = speech.load_whisper_onnx(spec.path, threads=opts.threads, name=spec.name)
    else:
        rt = speech.load_ctc(spec.path, threads=opts.threads, name=spec.name,
                             language=str(spec.manifest.get("language") or "en"))
    # Windows per batch: 30 s of audio each; on CPU a batch of 8 is already several seconds of work.
    return TranscriberHandle(rt, SpeechQueue(rt, max_batch=min(8, opts.max_batch_size), name=spec.name),
                             size_bytes=file_size(spec))


def speech_capabilities(folder: Path, fmt: str) -> set[str]:
    """Whisper models translate and detect languages unless English-only; CTranslate2 tells a
    multilingual vocabulary by its empty-string token (the English BPE has none)."""
    caps = {"transcribe", "timestamps", "word_timestamps"}
    if fmt != "ctranslate2":
        return caps
    try:
        if (folder / "vocabulary.json").is_file():
            multilingual = "" in json.loads((folder / "vocabulary.json").read_text())
        else:
            multilingual = "" in (folder / "vocabulary.txt").read_text(encoding="utf-8").split("\n")[:-1]
    except (OSError, ValueError):
        multilingual = False
    return caps | {"translate", "language_detection"} if multilingual else caps


WHISPER_ONNX_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json")


def transcriber_info(path: Path, fmt: str) -> dict[str, Any]:
    """{"transcriber": "ctranslate2" | "whisper-onnx" | "ctc"}, plus {"unsupported": reason}
    for an ONNX folder inferd cannot run (pure file inspection: nothing is loaded)."""
    if fmt != "onnx":
        return {"transcriber": fmt}
    folder = folder_of(path)
    cfg = config_of(folder)
    words = " ".join([str(cfg.get("model_type", "")), *map(str, cfg.get("architectures") or [])]).lower()
    if "whisper" in words or has_file(folder, "encoder_model.onnx"):
        missing = [f for f in WHISPER_ONNX_FILES if not (folder / f).is_file()]
        if not has_file(folder, "encoder_model.onnx"):
            missing.insert(0, "encoder_model.onnx")
        if not (has_file(folder, "decoder_model.onnx") and has_file(folder, "decoder_with_past_model.onnx")) \
                and not has_file(folder, "decoder_model_merged.onnx"):
            missing.append("decoder_model.onnx + decoder_with_past_model.onnx (or decoder_model_merged.onnx)")
        if missing:
            return {"transcriber": "whisper-onnx",
                    "unsupported": f"incomplete Whisper ONNX export: missing {', '.join(missing)}"}
        return {"transcriber": "whisper-onnx"}
    if path.is_file() or has_file(folder, "model.onnx"):
        return {"transcriber": "ctc"}
    kind = cfg.get("model_type") or (cfg.get("architectures") or ["?"])[0]
    return {"transcriber": "unknown", "unsupported": f"unsupported transcriber {kind}: neither a Whisper ONNX "
                                                     "export (encoder_model.onnx) nor a CTC model.onnx"}


def describe(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    onnx = path.suffix == ".onnx" if path.is_file() else bool(onnx_files(path))
    fmt = str(manifest.get("format") or ("onnx" if onnx else "ctranslate2"))  # as discovery's detect_format
    info = transcriber_info(path, fmt)
    if manifest.get("transcriber") and not info.get("unsupported"):
        info["transcriber"] = manifest["transcriber"]
    return {**manifest, **info}


def whisper_onnx_multilingual(folder: Path) -> bool:
    try:
        gen = json.loads((folder / "generation_config.json").read_text())
    except (OSError, ValueError):
        return False
    # is_multilingual decides where given (older configs have no lang_to_id: the runtime reads
    # the language tokens from the vocabulary)
    return isinstance(gen, dict) and bool(gen.get("is_multilingual", bool(gen.get("lang_to_id"))))


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    if manifest.get("unsupported"):
        return {"unsupported"}
    if manifest.get("transcriber") == "whisper-onnx":
        caps = {"transcribe", "timestamps"}  # no word timestamps: the graphs give no cross-attention
        multi = whisper_onnx_multilingual(folder_of(path))
        return caps | {"translate", "language_detection"} if multi else caps
    return speech_capabilities(folder_of(path), fmt)


TRANSCRIBER: KindSpec[TranscriberHandle] = KindSpec(
    ModelKind.TRANSCRIBER, {"ctranslate2": load, "onnx": load}, folder="transcribers", formats=("ctranslate2",),
    architectures=("Whisper", "ForCTC"), describe=describe, capabilities=capabilities, pipeline_tags=("automatic-speech-recognition",),
    faces=frozenset({"openai", "antfly"}), inputs=("audio",))
