"""Tree ensembles: validate the IR's node arrays, lay them out for fast evaluation, evaluate.

Layout used for evaluation (built once at load):
  * nodes are renumbered breadth-first per tree so that a node's right child is always its
    left child + 1; the step "go to a child" is then `node = left[node] + went_right`,
  * leaves point to themselves with threshold +inf, so extra steps keep them where they are
    and every (row, tree) pair can take the same number of steps (the depth) in lock-step,
  * thresholds are rounded to float32 towards -inf: for a float32 input x, `x <= t32` is then
    exactly `x <= t` for the IR's float64 threshold t (inputs are float32, like XGBoost and
    scikit-learn trees; LightGBM compares float64 inputs, so it matches to float32 rounding).

Evaluation is vectorised over rows x trees: one numpy step per tree level for a block of
rows, no Python loop per row or per tree. Finished (row, tree) pairs are dropped from the
working set as the ensemble gets deeper, so deep forests cost what their leaves' average
depth costs, not their maximum depth.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

# Rows evaluated together: large enough to amortise numpy's per-call cost, small enough
# for the working arrays (rows x trees) to stay in the CPU cache.
_BLOCK_PAIRS = 1 << 17


class TreeError(ValueError):
    pass


@dataclass(frozen=True)
class Forest:
    feature: np.ndarray      # int32 [n]  (0 at leaves)
    threshold: np.ndarray    # float32 [n] (+inf at leaves)
    left: np.ndarray         # int32 [n]  right child = left + 1; a leaf points to itself
    is_leaf: np.ndarray      # bool [n]
    nan_right: np.ndarray    # bool [n]   NaN goes right here (IR default_left false)
    leaf_value: np.ndarray   # float64 [n] or [n, k]
    roots: np.ndarray        # int32 [trees]
    depth: int               # longest root-to-leaf path, in edges
    tree_outputs: np.ndarray  # float64 [trees, k] one-hot: which output a scalar tree adds to
    base: np.ndarray         # float64 [k]
    scale: np.ndarray        # float64 [k] 1 for sums, 1/trees-per-output for means
    num_outputs: int

    @functools.cached_property
    def leaf_columns(self) -> np.ndarray:
        """Vector leaves, one contiguous row per output [k, n]."""
        return np.ascontiguousarray(self.leaf_value.T)

    @property
    def num_trees(self) -> int:
        return len(self.roots)

    @property
    def has_default_right(self) -> bool:
        return bool(self.nan_right.any())


def floor_float32(values: np.ndarray) -> np.ndarray:
    """Largest float32 <= each float64 value (so `x32 <= result` iff `x32 <= value`)."""
    v = np.asarray(values, dtype=np.float64)
    out = v.astype(np.float32)
    over = out.astype(np.float64) > v
    out[over] = np.nextafter(out[over], np.float32(-np.inf))
    return out


def _as_int(a, what: str, n: int | None = None) -> np.ndarray:
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        raise TreeError(f"{what}: must be an array of integers") from None
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        raise TreeError(f"{what}: must be a flat array of {n if n is not None else 'some'} integers, "
                        f"got shape {list(arr.shape)}")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
        raise TreeError(f"{what}: must hold integers")
    return arr.astype(np.int64)


def _as_float(a, what: str, n: int) -> np.ndarray:
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        raise TreeError(f"{what}: must be an array of numbers") from None
    if arr.ndim != 1 or len(arr) != n:
        raise TreeError(f"{what}: must be a flat array of {n} numbers, got shape {list(arr.shape)}")
    return arr


def compile_forest(nodes: dict, num_features: int, num_outputs: int, base_score, tree_outputs=None,
                   aggregation: str = "sum", where: str = "tree_ensemble") -> Forest:
    """Validate IR node arrays (the format: ir.py) and build the evaluation layout. Raises TreeError."""
    if not isinstance(nodes, dict):
        raise TreeError(f"{where}.nodes: must be an object")
    for key in ("feature_index", "threshold", "left_child", "right_child", "leaf_value", "tree_starts"):
        if key not in nodes:
            raise TreeError(f"{where}.nodes.{key}: missing")
    feat = _as_int(nodes["feature_index"], f"{where}.nodes.feature_index")
    n = len(feat)
    if n == 0:
        raise TreeError(f"{where}.nodes: the ensemble has no nodes")
    thr = _as_float(nodes["threshold"], f"{where}.nodes.threshold", n)
    left = _as_int(nodes["left_child"], f"{where}.nodes.left_child", n)
    right = _as_int(nodes["right_child"], f"{where}.nodes.right_child", n)
    dl = nodes.get("default_left")
    default_left = np.ones(n, bool) if dl is None else np.asarray(dl)
    if default_left.shape != (n,) or default_left.dtype.kind not in "bi":
        raise TreeError(f"{where}.nodes.default_left: must be {n} booleans")
    default_left = default_left.astype(bool)
    try:
        leaf = np.asarray(nodes["leaf_value"], dtype=np.float64)
    except (TypeError, ValueError):
        raise TreeError(f"{where}.nodes.leaf_value: must be numbers, or one list of numbers per node") from None
    if leaf.ndim == 2 and leaf.shape == (n, num_outputs):
        pass
    elif leaf.shape != (n,):
        raise TreeError(f"{where}.nodes.leaf_value: must be {n} numbers or {n} lists of {num_outputs} numbers, "
                        f"got shape {list(leaf.shape)}")
    roots = _as_int(nodes["tree_starts"], f"{where}.nodes.tree_starts")
    if len(roots) == 0:
        raise TreeError(f"{where}.nodes.tree_starts: the ensemble has no trees")
    if roots.min() < 0 or roots.max() >= n:
        raise TreeError(f"{where}.nodes.tree_starts: root index out of range 0..{n - 1}")

    is_leaf = feat < 0
    internal = ~is_leaf
    if np.any(feat[internal] >= num_features):
        bad = int(np.flatnonzero(internal & (feat >= num_features))[0])
        raise TreeError(f"{where}.nodes.feature_index[{bad}]: feature {int(feat[bad])} is out of range "
                        f"(the model has {num_features} features)")
    for name, child in (("left_child", left), ("right_child", right)):
        c = child[internal]
        if np.any((c < 0) | (c >= n)):
            bad = int(np.flatnonzero(internal & ((child < 0) | (child >= n)))[0])
            raise TreeError(f"{where}.nodes.{name}[{bad}]: child {int(child[bad])} out of range 0..{n - 1}")
    if np.any(np.isnan(thr[internal])):
        raise TreeError(f"{where}.nodes.threshold: a split node has a NaN threshold")
    if not np.all(np.isfinite(leaf[is_leaf])):
        raise TreeError(f"{where}.nodes.leaf_value: leaves must hold finite numbers")

    # Breadth-first walk of all trees at once: proves every tree is a proper tree (no cycles,
    # no shared nodes) and gives the new numbering with right = left + 1.
    seen = np.zeros(n, bool)
    seen[roots] = True
    if len(np.unique(roots)) != len(roots):
        raise TreeError(f"{where}.nodes.tree_starts: two trees share a root")
    order = [roots]
    frontier = roots
    depth = 0
    while True:
        inner = frontier[internal[frontier]]
        if len(inner) == 0:
            break
        kids = np.empty(2 * len(inner), np.int64)
        kids[0::2], kids[1::2] = left[inner], right[inner]
        if np.any(seen[kids]) or len(np.unique(kids)) != len(kids):
            raise TreeError(f"{where}.nodes: a node is reached twice (cycle or shared subtree)")
        seen[kids] = True
        order.append(kids)
        frontier = kids
        depth += 1
    order_all = np.concatenate(order)  # old ids in new order; roots first, then level by level

    new_id = np.full(n, -1, np.int64)
    new_id[order_all] = np.arange(len(order_all))
    m = len(order_all)  # unreachable nodes are dropped
    o_feat, o_leaf = feat[order_all], is_leaf[order_all]
    o_left = np.where(o_leaf, np.arange(m), new_id[np.where(o_leaf, 0, left[order_all])])
    if np.any(~o_leaf & (new_id[np.where(o_leaf, 0, right[order_all])] != o_left + 1)):
        raise TreeError(f"{where}.nodes: internal layout error")  # cannot happen by construction
    values = leaf[order_all].copy()
    values[~o_leaf] = 0.0

    # Which output each tree feeds (scalar leaves), and the aggregation.
    t = len(roots)
    if values.ndim == 1:
        if tree_outputs is None:
            outs = np.arange(t) % num_outputs  # Antfly's convention: classes interleave
        else:
            outs = _as_int(tree_outputs, f"{where}.tree_outputs", t)
            if outs.min() < 0 or outs.max() >= num_outputs:
                raise TreeError(f"{where}.tree_outputs: output index out of range 0..{num_outputs - 1}")
        onehot = np.zeros((t, num_outputs))
        onehot[np.arange(t), outs] = 1.0
        per_output = onehot.sum(0)
    else:
        if tree_outputs is not None:
            raise TreeError(f"{where}.tree_outputs: not allowed with vector leaf values")
        onehot = np.zeros((t, 0))
        per_output = np.full(num_outputs, float(t))
    if aggregation == "sum":
        scale = np.ones(num_outputs)
    elif aggregation == "mean":
        scale = 1.0 / np.maximum(per_output, 1.0)
    else:
        raise TreeError(f"{where}.aggregation: must be 'sum' or 'mean', got {aggregation!r}")
    try:
        base = np.broadcast_to(np.asarray(base_score if base_score is not None else 0.0, dtype=np.float64),
                               (num_outputs,)).copy()
    except (TypeError, ValueError):
        raise TreeError(f"{where}.base_score: must be a number or {num_outputs} numbers") from None
    thr32 = floor_float32(thr[order_all])
    thr32[o_leaf] = np.inf
    return Forest(feature=np.where(o_leaf, 0, o_feat).astype(np.int32), threshold=thr32,
                  left=o_left.astype(np.int32), is_leaf=o_leaf, nan_right=~default_left[order_all] & ~o_leaf,
                  leaf_value=values, roots=np.arange(t, dtype=np.int32), depth=depth,
                  tree_outputs=onehot, base=base, scale=scale, num_outputs=num_outputs)


def _leaves(f: Forest, x: np.ndarray) -> np.ndarray:
    """Leaf node of every (row, tree) pair, shape [rows * trees] (row-major), for float32 rows."""
    rows, width = x.shape
    t = f.num_trees
    flat = x.ravel()
    node = np.tile(f.roots, rows)
    offset = np.repeat(np.arange(rows, dtype=np.int32) * np.int32(width), t)
    nan_check = f.has_default_right and bool(np.isnan(flat).any())
    done = node  # final leaves, filled in as pairs finish
    pos = None   # positions in `done` of the pairs still walking (None: all of them)
    for level in range(f.depth):
        # Drop finished pairs once enough have reached a leaf (cheap test every 2 levels).
        if level >= 4 and level % 2 == 0:
            active = np.flatnonzero(~f.is_leaf[node])
            if len(active) < 0.8 * len(node):
                if pos is None:
                    done = node.copy()
                    pos = active
                else:
                    done[pos] = node
                    pos = pos[active]
                node, offset = node[active], offset[active]
                if len(node) == 0:
                    break
        col = f.feature[node]
        col += offset
        xv = flat[col]
        right = xv > f.threshold[node]
        if nan_check:
            right |= np.isnan(xv) & f.nan_right[node]
        node = f.left[node] + right
    if pos is None:
        return node
    done[pos] = node
    return done


_pool: ThreadPoolExecutor | None = None
_threads = max(1, min(8, os.cpu_count() or 1))


def set_threads(n: int | None) -> None:
    """Threads that evaluate blocks of rows in parallel (numpy releases the GIL in its loops)."""
    global _threads, _pool
    n = max(1, int(n or os.cpu_count() or 1))
    if n != _threads:
        _threads, _pool = n, None


def _block(f: Forest, x: np.ndarray, out: np.ndarray) -> None:
    rows = len(x)
    leaves = _leaves(f, x)
    if f.leaf_value.ndim == 1:
        vals = f.leaf_value[leaves].reshape(rows, f.num_trees)
        out[:] = vals.sum(1, keepdims=True) if f.num_outputs == 1 else vals @ f.tree_outputs
    else:  # one gather per output from a column-major copy: much faster than summing [rows, trees, k]
        leaves = leaves.reshape(rows, f.num_trees)
        for k in range(f.num_outputs):
            np.take(f.leaf_columns[k], leaves).sum(1, out=out[:, k])


def predict_raw(f: Forest, x: np.ndarray) -> np.ndarray:
    """Raw ensemble scores [rows, num_outputs] (before the output activation), float64."""
    global _pool
    x = np.ascontiguousarray(x, dtype=np.float32)
    rows = x.shape[0]
    out = np.empty((rows, f.num_outputs))
    block = max(1, _BLOCK_PAIRS // f.num_trees)
    spans = [(s, min(rows, s + block)) for s in range(0, rows, block)]
    if len(spans) > 1 and _threads > 1:
        if _pool is None:
            _pool = ThreadPoolExecutor(_threads, thread_name_prefix="inferd-trees")
        for fut in [_pool.submit(_block, f, x[s:e], out[s:e]) for s, e in spans]:
            fut.result()
    else:
        for s, e in spans:
            _block(f, x[s:e], out[s:e])
    out *= f.scale
    out += f.base
    return out
