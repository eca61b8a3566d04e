"""LightGBM models -> IR, read from LightGBM's text model format (`Booster.save_model("m.txt")`
or `model_to_string()`). Parsed directly: no lightgbm install is needed.

LightGBM goes left when `x <= threshold`, as the IR does. Its missing-value rule depends
on each split's missing type: NaN -> the default side; None -> NaN is treated as 0.0, so
NaN goes where 0.0 would; Zero -> 0.0 and NaN go to the default side (supported when
that side is where 0.0 would go anyway).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.runtimes.tabular.importers.common import TreeBuilder, UnsupportedModel, document

_IDENTITY = {"regression", "regression_l2", "regression_l1", "l1", "l2", "mse", "mae", "huber", "fair",
             "quantile", "mape", "rmse"}
_EXP = {"poisson", "gamma", "tweedie"}
_RANK = {"lambdarank", "rank_xendcg", "xendcg"}


def looks_like_lightgbm(text: str) -> bool:
    head = text[:4096]
    return head.startswith("tree\n") or ("version=v" in head and "num_tree_per_iteration=" in head)


def _sections(text: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    header: dict[str, str] = {}
    trees: list[dict[str, str]] = []
    current = header
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Tree="):
            current = {}
            trees.append(current)
        elif line in ("end of trees",) or line.startswith("feature_importances:") or line.startswith("parameters:"):
            current = {}  # trailing sections are not needed
        elif "=" in line:
            k, _, v = line.partition("=")
            current[k] = v
    return header, trees


def _arr(tree: dict[str, str], key: str, dtype) -> np.ndarray:
    v = tree.get(key, "").split()
    return np.asarray([float(x) for x in v], dtype=np.float64).astype(dtype)


def _tree(b: TreeBuilder, tree: dict[str, str], output: int, scale: float) -> None:
    leaves = int(tree["num_leaves"])
    leaf_value = _arr(tree, "leaf_value", np.float64) * scale
    if leaves == 1:  # a constant tree
        b.add([-1], [0.0], [-1], [-1], leaf_value[:1], [True], output=output)
        return
    if int(tree.get("num_cat", 0)) > 0:
        raise UnsupportedModel("LightGBM categorical splits are not supported")
    if tree.get("is_linear", "0") == "1":
        raise UnsupportedModel("LightGBM linear trees are not supported")
    n_int = leaves - 1
    feat = _arr(tree, "split_feature", np.int64)
    thr = _arr(tree, "threshold", np.float64)
    dt = _arr(tree, "decision_type", np.int64)
    lc, rc = _arr(tree, "left_child", np.int64), _arr(tree, "right_child", np.int64)
    if np.any(dt & 1):
        raise UnsupportedModel("LightGBM categorical splits are not supported")
    missing = (dt >> 2) & 3
    default_left = (dt & 2) > 0
    zero_left = 0.0 <= thr
    # None: NaN counts as 0.0. Zero: 0.0 and NaN take the default side, which we can only
    # express when 0.0 would go there by comparison too.
    if np.any((missing == 1) & (default_left != zero_left)):
        raise UnsupportedModel("LightGBM zero-as-missing splits whose default side differs from 0.0's side "
                               "are not supported")
    default_left = np.where(missing == 2, default_left, zero_left)
    # Internal nodes first, then leaves; a negative child c is leaf ~c.
    to_node = lambda c: np.where(c >= 0, c, n_int + (~c))  # noqa: E731
    b.add(np.concatenate([feat, np.zeros(leaves, np.int64)]), np.concatenate([thr, np.zeros(leaves)]),
          np.concatenate([to_node(lc), -np.ones(leaves, np.int64)]),
          np.concatenate([to_node(rc), -np.ones(leaves, np.int64)]),
          np.concatenate([np.zeros(n_int), leaf_value]), np.concatenate([default_left, np.ones(leaves, bool)]),
          output=output)


def convert(text: str, name: str) -> dict[str, Any]:
    header, trees = _sections(text)
    if not trees:
        raise UnsupportedModel("the LightGBM model has no trees")
    objective = header.get("objective", "regression").split()
    obj = objective[0] if objective else "regression"
    opts = dict(o.split(":", 1) for o in objective[1:] if ":" in o)
    k = int(header.get("num_tree_per_iteration", "1"))
    nf = int(header.get("max_feature_idx", "0")) + 1
    scale = 1.0
    if obj == "binary":
        task, activation, classes = "binary_classification", "sigmoid", 2
        scale = float(opts.get("sigmoid", "1"))  # P = sigmoid(s * raw)
    elif obj in ("cross_entropy", "xentropy"):
        task, activation, classes = "regression", "sigmoid", 0
    elif obj in ("multiclass", "softmax"):
        task, activation, classes = "multiclass", "softmax", int(opts.get("num_class", header.get("num_class", k)))
    elif obj in _IDENTITY:
        task, activation, classes = "regression", "identity", 0
    elif obj in _EXP:
        task, activation, classes = "regression", "exp", 0
    elif obj in _RANK:
        task, activation, classes = "ranking", "identity", 0
    else:
        raise UnsupportedModel(f"LightGBM objective {obj!r} is not supported")
    b = TreeBuilder()
    for i, t in enumerate(trees):
        _tree(b, t, i % k, scale)
    average = "average_output" in header or "average_output" in text[:4096].split("\n")
    names = header.get("feature_names", "").split() or None
    return document(name=name, framework="lightgbm", version=header.get("version", ""), task=task,
                    num_features=nf, num_classes=classes, activation=activation, num_outputs=k,
                    feature_names=names,
                    pipeline=[b.stage(nf, np.zeros(k) if k > 1 else 0.0, objective=obj,
                                      aggregation="mean" if average else "sum", with_outputs=k > 1)])
