"""One onnxruntime session per loaded encoder: inputs discovered from the graph, threads set
from --threads, CPU execution provider."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from inferd.errors import ModelLoadFailed

_INT_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


def open_session(model: Path | bytes, threads: int | None = None, spin: bool = True) -> ort.InferenceSession:
    """One CPU onnxruntime session as every ONNX runtime of inferd opens it: `threads` for the
    operators of one forward pass (the model's worker is the only caller), full graph
    optimisation, quiet logs. A graph onnxruntime refuses is a ModelLoadFailed.

    `spin=False`: the operator threads sleep between parallel sections instead of busy-waiting
    for the next one. Batched encoders pass it: their passes are long, so waking costs little,
    while a spinning pool takes the cores that the event loop needs to answer the requests of
    the batch (measured: 32 one-sentence clients went from about 260 to 450 requests/s on 2
    cores under outside load, and level on a quieter machine; bench/embeddings.py).
    Token-by-token decoders keep spinning (short steps)."""
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(model if isinstance(model, bytes) else str(model), so,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own types for bad graphs
        what = model.name if isinstance(model, Path) else "the graph"
        raise ModelLoadFailed(f"onnxruntime could not load {what}: {e}") from e


class OnnxSession:
    def __init__(self, model: Path | bytes, threads: int | None = None, spin: bool = True):
        self.sess = open_session(model, threads, spin)
        self.inputs = {i.name: _INT_TYPES.get(i.type, np.int64) for i in self.sess.get_inputs()}
        if "input_ids" not in self.inputs:
            raise ModelLoadFailed(f"the graph has no input_ids input (inputs: {sorted(self.inputs)})")
        self.outputs = {o.name: o.shape for o in self.sess.get_outputs()}

    def run(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray,
            outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        if "position_ids" in self.inputs:
            feed["position_ids"] = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
        feed = {k: np.ascontiguousarray(v, dtype=self.inputs[k]) for k, v in feed.items() if k in self.inputs}
        names = outputs or list(self.outputs)
        return dict(zip(names, self.sess.run(names, feed)))
