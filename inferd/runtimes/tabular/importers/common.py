"""Helpers shared by the importers: assembling IR documents and tree node arrays."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import numpy as np

from inferd.runtimes.tabular.ir import SCHEMA_VERSION


class UnsupportedModel(ValueError):
    """The model (or one of its options) has no equivalent in the IR."""


class TreeBuilder:
    """Concatenates trees given with tree-local child indices (-1: none) into the IR's
    global struct-of-arrays node layout."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in (
            "feature_index", "threshold", "left_child", "right_child", "leaf_value", "default_left")}
        self.starts: list[int] = []
        self.outputs: list[int] = []
        self.count = 0
        self.max_depth = 0

    def add(self, feature, threshold, left, right, leaf_value, default_left, output: int = 0) -> None:
        """One tree; node 0 is its root."""
        feature = np.asarray(feature, np.int64)
        n = len(feature)
        left, right = np.asarray(left, np.int64), np.asarray(right, np.int64)
        is_leaf = left < 0
        feature = np.where(is_leaf, -1, feature)
        self.cols["feature_index"].append(feature)
        self.cols["threshold"].append(np.where(is_leaf, 0.0, np.asarray(threshold, np.float64)))
        self.cols["left_child"].append(np.where(is_leaf, -1, left + self.count))
        self.cols["right_child"].append(np.where(is_leaf, -1, right + self.count))
        lv = np.asarray(leaf_value, np.float64)
        self.cols["leaf_value"].append(np.where(is_leaf if lv.ndim == 1 else is_leaf[:, None], lv, 0.0))
        self.cols["default_left"].append(np.asarray(default_left, bool) & ~is_leaf)
        self.starts.append(self.count)
        self.outputs.append(int(output))
        self.count += n
        self.max_depth = max(self.max_depth, _depth(left, right))

    def stage(self, num_features: int, base_score, objective: str = "", aggregation: str = "sum",
              with_outputs: bool = False) -> dict[str, Any]:
        if not self.starts:
            raise UnsupportedModel("the ensemble has no trees")
        nodes = {k: np.concatenate(v).tolist() for k, v in self.cols.items()}
        nodes["tree_starts"] = self.starts
        body: dict[str, Any] = {"objective": objective, "num_trees": len(self.starts), "num_features": num_features,
                                "max_depth": self.max_depth, "nodes": nodes,
                                "base_score": base_score.tolist() if isinstance(base_score, np.ndarray) else base_score}
        if aggregation != "sum":
            body["aggregation"] = aggregation
        if with_outputs:
            body["tree_outputs"] = self.outputs
        return {"type": "tree_ensemble", "tree_ensemble": body}


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """Edges on the longest root-to-leaf path (one numpy step per level)."""
    frontier, depth = np.array([0]), 0
    for _ in range(len(left)):
        frontier = frontier[left[frontier] >= 0]
        if len(frontier) == 0:
            return depth
        frontier = np.concatenate([left[frontier], right[frontier]])
        depth += 1
    return depth


def document(*, name: str, framework: str, version: str, task: str, num_features: int, num_classes: int,
             activation: str, num_outputs: int, pipeline: list[dict], feature_names=None,
             class_labels=None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "source_framework": framework, "source_version": version, "task": task,
                            "num_features": int(num_features), "num_classes": int(num_classes),
                            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if feature_names is not None and len(feature_names):
        meta["feature_names"] = [str(f) for f in feature_names]
        meta["feature_types"] = ["float"] * int(num_features)
    if class_labels is not None and len(class_labels) == num_classes:
        meta["class_labels"] = [str(c) for c in class_labels]
    return {"schema_version": SCHEMA_VERSION, "metadata": meta,
            "output": {"activation": activation, "num_outputs": int(num_outputs)}, "pipeline": pipeline}
