"""Speakers (text to speech): Piper/VITS voices, an `.onnx` graph with its `.onnx.json`
config, on onnxruntime, phonemised by espeak-ng (runtimes/tts), behind a queue that
synthesises the sentences of concurrent requests in batches (scheduling/synthesis.py).
A voice's speakers, sample rate and language are read from its config at discovery, so the
catalogs list them before it is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.errors import ModelLoadFailed
from inferd.kinds.spec import KindSpec, file_size
from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import SpeakerHandle

# Phoneme ids padded into one batch (about 8 sentences of 250 ids).
MAX_BATCH_IDS = 2048


def load(spec: ModelSpec, opts: RuntimeOptions) -> SpeakerHandle:
    from inferd.runtimes.tts.piper import load_piper
    from inferd.scheduling.synthesis import SynthesisQueue
    from inferd.service.handles import SpeakerHandle

    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    batch = min(8, opts.max_batch_size)
    rt = load_piper(spec.path, threads=opts.threads, name=spec.name, max_batch=batch)
    return SpeakerHandle(rt, SynthesisQueue(rt, max_batch=rt.max_batch, max_tokens=MAX_BATCH_IDS, name=spec.name),
                         size_bytes=file_size(spec))


def voice_info(path: Path, name: str) -> dict[str, Any]:
    """The catalog facts of a Piper voice (its speakers, sample rate, language), from its config."""
    from inferd.runtimes.tts.voice import describe as describe_config, read_config

    return describe_config(read_config(path), name)


def describe(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    try:
        info = voice_info(path, path.stem if path.is_file() else path.name)
    except ModelLoadFailed as e:
        raise ValueError(str(e)) from e  # discovery reports and skips the folder
    return {**info, **manifest}


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    return {"speech"} | ({"multi_speaker"} if len(manifest.get("voices") or ()) > 1 else set())


def catalog(spec: ModelSpec) -> dict[str, Any]:
    m = spec.manifest
    return {"voices": list(m.get("voices") or []), "openai_voices": list(m.get("openai_voices") or []),
            "sample_rate": m.get("sample_rate"), "language": m.get("language")}


SPEAKER: KindSpec[SpeakerHandle] = KindSpec(
    ModelKind.SPEAKER, {"onnx": load}, folder="speakers", describe=describe, capabilities=capabilities,
    faces=frozenset({"openai", "antfly"}), inputs=("text",), catalog=catalog,
    routes=("inferd.api.openai.speech:router",))  # /v1/audio/speech: this kind's alone
