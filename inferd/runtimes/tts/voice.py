"""A Piper voice's files and what its config says, read without loading anything (discovery
and the catalogs use it; the runtime too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferd.errors import ModelLoadFailed
from inferd.runtimes.tts.types import OPENAI_VOICES


def config_of(path: Path) -> Path:
    """The .onnx.json beside a voice's graph (a folder: its one *.onnx with a config)."""
    return path.with_name(path.name + ".json")


def voice_files(path: Path) -> tuple[Path, Path]:
    """(graph, config) of a Piper voice given as its .onnx file or the folder holding it."""
    if path.is_file():
        onnx_path = path
    else:
        found = sorted(p for p in path.glob("*.onnx") if config_of(p).is_file())
        if not found:
            raise ModelLoadFailed(f"{path}: no Piper voice (an .onnx with its .onnx.json beside it)")
        onnx_path = found[0]
    if not config_of(onnx_path).is_file():
        raise ModelLoadFailed(f"{onnx_path}: its config {config_of(onnx_path).name} is missing")
    return onnx_path, config_of(onnx_path)


def describe(config: dict[str, Any], fallback_name: str) -> dict[str, Any]:
    """What catalogs show of a voice, from its config alone (discovery reads no graph):
    its speaker names (the model's own name for one speaker), sample rate and language."""
    speakers = sorted((config.get("speaker_id_map") or {}).items(), key=lambda kv: kv[1])
    own = [name for name, _ in speakers] or [str(config.get("dataset") or fallback_name)]
    lang = config.get("language") or {}
    return {"family": "piper", "voices": own, "openai_voices": list(OPENAI_VOICES),
            "sample_rate": int((config.get("audio") or {}).get("sample_rate") or 22050),
            "language": str(lang.get("code") or (config.get("espeak") or {}).get("voice") or ""),
            "quality": (config.get("audio") or {}).get("quality")}


def read_config(path: Path) -> dict[str, Any]:
    """The config of the voice at `path` (its .onnx or its folder); ModelLoadFailed if unreadable."""
    _, config = voice_files(path)
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as e:
        raise ModelLoadFailed(f"{config}: not a Piper voice config ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("phoneme_id_map"), dict):
        raise ModelLoadFailed(f"{config}: not a Piper voice config (no phoneme_id_map)")
    return data
