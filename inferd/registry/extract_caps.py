"""Capabilities of extractor and classifier folders, read from their files alone (nothing is
loaded): what /ai/v1/models lists for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _labels(folder: Path) -> list[str]:
    try:
        return [str(v) for v in (json.loads((folder / "config.json").read_text()).get("id2label") or {}).values()]
    except (OSError, ValueError, AttributeError):
        return []


def extract_capabilities(kind_value: str, fmt: str, folder: Path, manifest: dict[str, Any]) -> set[str]:
    """What an extractor or classifier folder can do, from its files alone (for /ai/v1/models)."""
    caps: set[str] = set()
    if kind_value == "extractor":
        caps.add("entities")
        if fmt == "onnx" and (folder / "gliner_config.json").is_file():
            caps.add("zero_shot")
    elif kind_value == "classifier":
        caps.add("classifications")
        if any(v.lower().startswith("entail") for v in _labels(folder)) and not manifest.get("fixed_labels"):
            caps.add("zero_shot")
    if manifest.get("generator"):
        caps.add("structures")
    return caps
