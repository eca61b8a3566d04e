"""Task prefixes: task_type / input_type -> the text a model's manifest says to prepend
(E5 "query: "/"passage: ", ColBERT "[Q] "/"[D] "). Pure; shared by the ONNX and GGUF embedders."""

from __future__ import annotations

from typing import Any

from inferd.errors import InvalidInput

# task_type / input_type -> the manifest prefix key they select.
TASK_PREFIX = {"retrieval_query": "query", "search_query": "query", "query": "query", "question_answering": "query",
               "code_retrieval_query": "query", "retrieval_document": "document", "search_document": "document",
               "document": "document", "passage": "document", "semantic_similarity": "similarity",
               "classification": "classification", "clustering": "clustering", "fact_verification": "query"}


def prefixes_of(manifest: dict[str, Any]) -> dict[str, str]:
    """{"query": "query: ", "document": "passage: "} from `prefixes` or `query_prefix`-style keys."""
    out = {str(k): str(v) for k, v in (manifest.get("prefixes") or {}).items()}
    for key in ("query", "document", "similarity", "classification", "clustering"):
        if manifest.get(f"{key}_prefix") is not None:
            out[key] = str(manifest[f"{key}_prefix"])
    return out


def task_prefix(prefixes: dict[str, str], task: str | None) -> str:
    """The text to prepend for `task` (task_type / input_type); unknown tasks are a 400."""
    if not task:
        return ""
    key = TASK_PREFIX.get(task.lower())
    if key is None:
        raise InvalidInput(f"unknown task_type/input_type {task!r}", "task_type")
    return prefixes.get(key, "")
