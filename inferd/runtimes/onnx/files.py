"""Which files make up an ONNX encoder model folder, and its manifest settings.

Pure file inspection. The graph picked is, in order: the manifest's `onnx_file`; a quantized
variant (`model_quantized.onnx`, `*_int8.onnx`, `*-i8.onnx`, `*_quantized.onnx`) unless the
manifest says `"quantized": false` or the server runs with `--no-prefer-quantized`; `model.onnx`;
the only graph there is. Graphs may sit at the top level or in `onnx/` (Hugging Face layout)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferd.errors import ModelLoadFailed
from inferd.models import onnx_files
from inferd.models import ModelSpec

_QUANTIZED = re.compile(r"(quantized|int8|[-_]i8|[-_]q8|qint8|uint8)", re.IGNORECASE)
# Exports that are not the encoder itself (decoder halves of seq2seq models and the like).
_SKIP = re.compile(r"(decoder|_with_past|merged)", re.IGNORECASE)


@dataclass
class ModelFiles:
    graph: Path | None            # None when the weights are safetensors (graph built at load)
    tokenizer: Path
    folder: Path
    config: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    safetensors: Path | None = None


def is_quantized(p: Path) -> bool:
    return bool(_QUANTIZED.search(p.stem))


def pick_graph(candidates: list[Path], manifest: dict[str, Any], prefer_quantized: bool = True) -> Path:
    if not candidates:
        raise ModelLoadFailed("no .onnx graph found")
    usable = [p for p in candidates if not _SKIP.search(p.stem)] or candidates
    quant = [p for p in usable if is_quantized(p)]
    plain = [p for p in usable if not is_quantized(p)]
    if prefer_quantized and manifest.get("quantized", True) is not False and quant:
        # model_quantized.onnx is the name optimum writes; prefer it among several variants.
        return sorted(quant, key=lambda p: (p.stem != "model_quantized", len(p.name), p.name))[0]
    if plain:
        return sorted(plain, key=lambda p: (p.stem != "model", len(p.name), p.name))[0]
    return sorted(quant)[0]


def _read_json(p: Path) -> dict[str, Any]:
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ModelLoadFailed(f"{p}: unreadable JSON ({e})") from e
    return data if isinstance(data, dict) else {}


def locate(spec: ModelSpec, prefer_quantized: bool = True) -> ModelFiles:
    if spec.path is None:
        raise ModelLoadFailed(f"model '{spec.name}' has no files")
    path = Path(spec.path)
    folder = path.parent if path.is_file() else path
    manifest = dict(spec.manifest or {})
    graph: Path | None = None
    st: Path | None = None
    if path.is_file() and path.suffix == ".onnx":
        graph = path
    elif manifest.get("onnx_file"):
        graph = folder / str(manifest["onnx_file"])
        if not graph.is_file():
            raise ModelLoadFailed(f"{graph}: the manifest's onnx_file does not exist")
    elif onnx_files(folder):
        graph = pick_graph(onnx_files(folder), manifest, prefer_quantized)
    elif (folder / "model.safetensors").is_file():
        st = folder / "model.safetensors"
    else:
        raise ModelLoadFailed(f"{folder}: no .onnx graph and no model.safetensors")
    tok = folder / str(manifest.get("tokenizer", "tokenizer.json"))
    if not tok.is_file():
        raise ModelLoadFailed(f"{folder}: no tokenizer.json (the Hugging Face tokenizers file is required)")
    config = _read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    pooling_cfg = folder / "1_Pooling" / "config.json"  # sentence-transformers layout
    if pooling_cfg.is_file() and "pooling" not in manifest:
        pc = _read_json(pooling_cfg)
        for key, mode in (("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
                          ("pooling_mode_lasttoken", "last")):
            if pc.get(key):
                manifest["pooling"] = mode
                break
    return ModelFiles(graph=graph, tokenizer=tok, folder=folder, config=config, manifest=manifest, safetensors=st)


def max_length(files: ModelFiles, tokenizer_limit: int | None) -> int:
    """The truncation length: the manifest's `max_length`, else the smallest of the model's
    position table and the tokenizer's own truncation setting, else 512."""
    if files.manifest.get("max_length"):
        return int(files.manifest["max_length"])
    limits = [int(v) for v in (files.config.get("max_position_embeddings"), tokenizer_limit) if v]
    # RoBERTa-style position tables reserve two slots for the padding offset.
    if files.config.get("model_type") in ("roberta", "xlm-roberta", "camembert") and limits:
        limits[0] -= 2
    return min(limits) if limits else 512
