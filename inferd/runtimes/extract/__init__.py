"""Extraction runtimes (leaves): GLiNER span models (gliner.py), ONNX token and sequence
classifiers (classifiers.py). spaCy pipelines live in inferd/runtimes/spacy. Their loaders,
which attach the batcher, are in inferd/service/extract_loading.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferd.errors import ModelLoadFailed


class RawSession:
    """An onnxruntime session fed by name (GLiNER's graph takes more than ids and masks)."""

    def __init__(self, path: Path, threads: int | None = None):
        import onnxruntime as ort

        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            self.sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own types for bad graphs
            raise ModelLoadFailed(f"onnxruntime could not load {path}: {e}") from e
        self.inputs = {i.name for i in self.sess.get_inputs()}

    def run(self, outputs: list[str], feed: dict[str, Any]) -> list[Any]:
        return self.sess.run(outputs, {k: v for k, v in feed.items() if k in self.inputs})
