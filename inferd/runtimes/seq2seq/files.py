"""Which files make up a seq2seq rewriter folder, and its generation settings.

Layouts (graphs at the top level or in `onnx/`):
- Antfly:            encoder.onnx, decoder-init.onnx (first step), decoder.onnx (with past)
- optimum:           encoder_model.onnx, decoder_model.onnx, decoder_with_past_model.onnx
- optimum (merged):  encoder_model.onnx, decoder_model_merged.onnx (`use_cache_branch` input)
- CTranslate2:       model.bin + a vocabulary file (shared_vocabulary.json/.txt or source/target)

A quantized variant of a graph (`encoder_model_quantized.onnx`, `decoder-int8.onnx`, ...) is
preferred, as for embedders, unless the manifest says `"quantized": false` or the server runs
with --no-prefer-quantized. Pure file inspection."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferd.errors import ModelLoadFailed

_QUANT_SUFFIX = re.compile(r"^[-_](quantized|int8|i8|q8|qint8|uint8)$", re.IGNORECASE)
# (layout, role -> base name); the first layout whose decoder graphs exist wins.
LAYOUTS: list[tuple[str, dict[str, str]]] = [
    ("optimum-merged", {"encoder": "encoder_model", "merged": "decoder_model_merged"}),
    ("optimum", {"encoder": "encoder_model", "init": "decoder_model", "past": "decoder_with_past_model"}),
    ("antfly", {"encoder": "encoder", "init": "decoder-init", "past": "decoder"}),
]


@dataclass
class Seq2SeqFiles:
    folder: Path
    layout: str                              # one of LAYOUTS' names, or "ctranslate2"
    graphs: dict[str, Path]                  # role (encoder, init, past, merged) -> file
    tokenizer: Path
    config: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)


def _read_json(p: Path) -> dict[str, Any]:
    if not p.is_file():
        return {}
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ModelLoadFailed(f"{p}: unreadable JSON ({e})") from e
    return data if isinstance(data, dict) else {}


def _variant(graphs: list[Path], base: str, prefer_quantized: bool) -> Path | None:
    plain = [p for p in graphs if p.stem == base]
    quant = [p for p in graphs if p.stem.startswith(base) and _QUANT_SUFFIX.match(p.stem[len(base):])]
    if prefer_quantized and quant:
        return sorted(quant, key=lambda p: (len(p.name), p.name))[0]
    return plain[0] if plain else (sorted(quant)[0] if quant else None)


def locate(folder: Path, manifest: dict[str, Any], prefer_quantized: bool = True) -> Seq2SeqFiles:
    if not folder.is_dir():
        raise ModelLoadFailed(f"{folder}: a rewriter is a folder")
    prefer = prefer_quantized and manifest.get("quantized", True) is not False
    tok = folder / str(manifest.get("tokenizer", "tokenizer.json"))
    if not tok.is_file():
        raise ModelLoadFailed(f"{folder}: no tokenizer.json (the Hugging Face tokenizers file is required)")
    config = _read_json(folder / "config.json")
    generation = _read_json(folder / "generation_config.json")
    if (folder / "model.bin").is_file() and not list(folder.glob("*.onnx")):
        return Seq2SeqFiles(folder, "ctranslate2", {"model": folder / "model.bin"}, tok, config, generation, manifest)
    graphs = sorted([*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")])
    for name, roles in LAYOUTS:
        found = {role: _variant(graphs, base, prefer) for role, base in roles.items()}
        if all(found.values()):
            return Seq2SeqFiles(folder, name, found, tok, config, generation, manifest)  # type: ignore[arg-type]
    names = ", ".join(p.name for p in graphs) or "none"
    raise ModelLoadFailed(f"{folder}: not a seq2seq export (found graphs: {names}); expected encoder.onnx + "
                          "decoder-init.onnx + decoder.onnx, or optimum's encoder_model.onnx + "
                          "decoder_model.onnx + decoder_with_past_model.onnx (or decoder_model_merged.onnx)")


def input_limit(files: Seq2SeqFiles, tokenizer_limit: int | None) -> int:
    """Longest input in tokens: the manifest's `max_length`, else the smallest of the model's
    position table and the tokenizer's own truncation, else 512."""
    if files.manifest.get("max_length"):
        return int(files.manifest["max_length"])
    c = files.config
    limits = [int(v) for v in (c.get("max_position_embeddings"), tokenizer_limit) if v]
    return min(limits) if limits else 512


def architecture(folder: Path, manifest: dict[str, Any]) -> str | None:
    if manifest.get("architecture"):
        return str(manifest["architecture"])
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    return str(archs[0]) if archs else (str(cfg["model_type"]) if cfg.get("model_type") else None)
