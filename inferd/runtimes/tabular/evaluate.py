"""Run a validated TabularModel on a batch of rows: vectorised numpy, no loop per row.

Inputs are float32 (as in Antfly, XGBoost and scikit-learn trees); preprocessing, linear and
SVM stages compute in float64 from those float32 values, trees compare in float32 (see
trees.py), and scores accumulate in float64. Results therefore equal the source library
to float32 rounding of the inputs.
"""

from __future__ import annotations

import numpy as np

from inferd.errors import InvalidInput
from inferd.runtimes.tabular.ir import SVM, Imputer, Linear, Scaler, Stage, TabularModel
from inferd.runtimes.tabular.trees import Forest, predict_raw

_SVM_BLOCK = 1 << 21  # kernel matrix entries per block (16 MiB of float64)


def to_matrix(rows, num_features: int) -> np.ndarray:
    """Request rows (lists, `None` meaning missing, or a 2-D numeric array already parsed by
    the API layer, NaN meaning missing) -> float32 [rows, features]. Raises InvalidInput naming
    the first bad row or value."""
    if len(rows) == 0:
        raise InvalidInput("'input' must hold at least one row", "input")
    if isinstance(rows, np.ndarray):
        if rows.ndim != 2 or rows.dtype.kind not in "fiu":
            raise InvalidInput(f"'input' must be a 2-D numeric matrix, got shape {list(rows.shape)} of {rows.dtype}",
                               "input")
        if rows.shape[1] != num_features:
            raise InvalidInput(f"input[0] has {rows.shape[1]} values; the model takes exactly {num_features} features",
                               "input[0]")
        x = rows
    else:
        for i, r in enumerate(rows):
            if len(r) != num_features:
                raise InvalidInput(f"input[{i}] has {len(r)} values; the model takes exactly {num_features} "
                                   "features", f"input[{i}]")
        try:
            x = np.array(rows, dtype=np.float64)  # None -> NaN
        except (TypeError, ValueError) as e:
            raise InvalidInput(f"'input' must be rows of numbers: {e}", "input") from None
    if x.dtype.kind != "f":
        return x.astype(np.float32)  # integers: every int64 is within float32 range
    if np.isinf(x).any():
        r, c = np.argwhere(np.isinf(x))[0]
        raise InvalidInput(f"input[{r}][{c}] is infinite; use a finite number, or null/NaN for a missing value",
                           f"input[{r}][{c}]")
    if x.dtype == np.float32:
        return x
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    if np.isinf(x32).any():
        r, c = np.argwhere(np.isinf(x32))[0]
        raise InvalidInput(f"input[{r}][{c}] is out of float32 range", f"input[{r}][{c}]")
    return x32


def _no_missing(x: np.ndarray, what: str) -> None:
    if np.isnan(x).any():
        r, c = np.argwhere(np.isnan(x))[0]
        raise InvalidInput(f"input[{r}][{c}] is missing (null/NaN) and this {what} model has no imputer "
                           "to fill it", f"input[{r}][{c}]")


def _impute(s: Imputer, x: np.ndarray) -> np.ndarray:
    missing = np.isnan(x) if np.isnan(s.missing_value) else (x == s.missing_value)
    return np.where(missing, s.fill, x)


def _kernel(s: SVM, x: np.ndarray) -> np.ndarray:
    """Kernel matrix [rows, vectors] in float64."""
    sv = s.support_vectors
    dot = x @ sv.T
    if s.kernel == "linear":
        return dot
    if s.kernel == "poly":
        return (s.gamma * dot + s.coef0) ** s.degree
    if s.kernel == "sigmoid":
        return np.tanh(s.gamma * dot + s.coef0)
    # rbf: ||x - v||^2 = ||x||^2 + ||v||^2 - 2 x.v, clipped at 0 against rounding
    d2 = (x * x).sum(1)[:, None] + (sv * sv).sum(1)[None, :] - 2.0 * dot
    np.maximum(d2, 0.0, out=d2)
    return np.exp(-s.gamma * d2)


def _ovo_to_ovr(dec: np.ndarray, k: int) -> np.ndarray:
    """scikit-learn's one-vs-rest view of one-vs-one decisions: votes plus confidences
    squashed into (-1/3, 1/3) so they only break ties between equal vote counts."""
    rows = dec.shape[0]
    votes = np.zeros((rows, k))
    conf = np.zeros((rows, k))
    p = 0
    for i in range(k):          # loops over class pairs (a model constant), not rows
        for j in range(i + 1, k):
            d = dec[:, p]
            votes[:, i] += d >= 0
            votes[:, j] += d < 0
            conf[:, i] += d
            conf[:, j] -= d
            p += 1
    return votes + conf / (3.0 * (np.abs(conf) + 1.0))


def _svm(s: SVM, x: np.ndarray) -> np.ndarray:
    block = max(1, _SVM_BLOCK // len(s.support_vectors))
    out = np.empty((len(x), len(s.intercept)))
    for a in range(0, len(x), block):
        out[a:a + block] = _kernel(s, x[a:a + block]) @ s.dual.T + s.intercept
    return _ovo_to_ovr(out, s.ovo_classes) if s.ovo_classes else out


def activate(z: np.ndarray, activation: str) -> np.ndarray:
    if activation == "sigmoid":
        # 1 / (1 + e^-z) without overflow warnings for large |z|
        e = np.exp(-np.abs(z))
        return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    if activation == "softmax":
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    if activation == "exp":
        return np.exp(z)
    return z


def run_stage(stage: Stage, x: np.ndarray) -> np.ndarray:
    if isinstance(stage, Imputer):
        return _impute(stage, x.astype(np.float64))
    if isinstance(stage, Scaler):
        return (x.astype(np.float64) - stage.center) / stage.scale
    if isinstance(stage, Forest):
        return predict_raw(stage, x)
    x = x.astype(np.float64)
    if isinstance(stage, Linear):
        _no_missing(x, "linear")
        return activate(x @ stage.weights.T + stage.biases, stage.activation)
    if isinstance(stage, SVM):
        _no_missing(x, "svm")
        return _svm(stage, x)
    raise TypeError(f"unknown stage {type(stage).__name__}")


def predict(model: TabularModel, x: np.ndarray) -> np.ndarray:
    """[rows, features] float32 -> predictions [rows, num_outputs] float64."""
    if x.ndim != 2 or x.shape[1] != model.metadata.num_features:
        raise InvalidInput(f"expected rows of {model.metadata.num_features} features, got shape {list(x.shape)}")
    for stage in model.stages:
        x = run_stage(stage, x)
    return activate(x, model.activation)
