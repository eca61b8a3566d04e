"""Transcribers (speech to text): Whisper as a CTranslate2 folder (faster-whisper) or a CTC
model as an ONNX folder (runtimes/speech), behind a queue that batches the 30 s windows of
concurrent requests (scheduling/speech.py). A multilingual Whisper also translates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelLoadFailed
from inferd.kinds.spec import KindSpec, file_size, folder_of
from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import TranscriberHandle


def load(spec: ModelSpec, opts: RuntimeOptions) -> TranscriberHandle:
    from inferd.runtimes import speech
    from inferd.scheduling.speech import SpeechQueue
    from inferd.service.handles import TranscriberHandle

    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    if spec.format == "ctranslate2":
        rt = speech.load_whisper(spec.path, threads=opts.threads, name=spec.name,
                                 compute_type=str(spec.manifest.get("compute_type") or "default"))
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


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    return speech_capabilities(folder_of(path), fmt)


TRANSCRIBER: KindSpec[TranscriberHandle] = KindSpec(
    ModelKind.TRANSCRIBER, {"ctranslate2": load, "onnx": load}, folder="transcribers", formats=("ctranslate2",),
    architectures=("Whisper", "ForCTC"), capabilities=capabilities, pipeline_tags=("automatic-speech-recognition",),
    faces=frozenset({"openai", "antfly"}), inputs=("audio",))
