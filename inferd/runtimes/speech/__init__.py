"""Speech runtimes (leaf): Whisper in CTranslate2 format through faster-whisper, Whisper
exported to ONNX (optimum's layout) on onnxruntime, and CTC models (Wav2Vec2, HuBERT) exported to ONNX on onnxruntime. Audio decoding through PyAV.

Both satisfy the same structural protocol, which inferd/scheduling/speech.py drives:
`rate`, `multilingual`, `capabilities`, `check(opts, language)`,
`decode_batch(chunks, opts) -> [ChunkResult]` (one batch, on the model's worker thread), `close()`.
Nothing here imports the service, registry, scheduling or api layers."""

from __future__ import annotations

from pathlib import Path

from inferd.speech_types import Chunk, ChunkResult, DecodeOptions, Segment, Word


def load_whisper(path: Path, threads: int | None = None, name: str = "", compute_type: str = "default"):
    from inferd.runtimes.speech.whisper import WhisperRuntime

    return WhisperRuntime(path, threads=threads, compute_type=compute_type, name=name)


def load_whisper_onnx(path: Path, threads: int | None = None, name: str = ""):
    from inferd.runtimes.speech.whisper_onnx import WhisperOnnxRuntime

    return WhisperOnnxRuntime(path, threads=threads, name=name)


def load_ctc(path: Path, threads: int | None = None, name: str = "", language: str = "en"):
    from inferd.runtimes.speech.ctc import CtcRuntime

    return CtcRuntime(path, threads=threads, name=name, language=language)


__all__ = ["Chunk", "ChunkResult", "DecodeOptions", "Segment", "Word", "load_ctc", "load_whisper", "load_whisper_onnx"]
