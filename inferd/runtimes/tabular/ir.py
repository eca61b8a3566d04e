"""The tabular model IR (`tabular_model.json`, schema_version 1): parse and validate.

The format is Antfly's (docs/tabular.md): metadata, an output activation, and a
pipeline of preprocessing stages (`imputer`, `scaler`) followed by one model stage
(`tree_ensemble`, `linear`, `svm`). Each stage is `{"type": T, T: {...fields}}`; the fields
may also sit directly in the stage object. inferd adds a few optional fields, all ignored
by a reader that does not know them:

  tree_ensemble  leaf_value may be one list per node (vector leaves, e.g. a random forest's
                 class probabilities); `tree_outputs` [trees] says which output a tree with
                 scalar leaves adds to (default: tree i -> output i % num_outputs);
                 `aggregation` "sum" (default) or "mean"; `base_score` may be a list.
  svm            `multiclass: "ovo"` + `num_classes`: the rows of dual_coefficients are the
                 one-vs-one pair classifiers (0,1), (0,2), ..., (k-2,k-1) and the outputs are
                 scikit-learn's one-vs-rest decision values (votes + scaled confidence).
  imputer        `missing_value` (default NaN): the value that means "missing".
  metadata       `class_labels`: a name for each class.

Everything here is pure: `parse(doc)` returns a validated TabularModel or raises IRError
whose message says which field is wrong. Discovery calls `check_file` so a broken file is
reported at start and never stops the other predictors.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferd.runtimes.tabular.trees import Forest, TreeError, compile_forest

SCHEMA_VERSION = 1
TASKS = ("regression", "binary_classification", "multiclass", "ranking")
ACTIVATIONS = ("identity", "sigmoid", "softmax", "exp")
MODEL_STAGES = ("tree_ensemble", "linear", "svm")
PRE_STAGES = ("scaler", "imputer")
KERNELS = ("rbf", "linear", "poly", "sigmoid")
SCALER_METHODS = ("standard", "minmax", "robust", "maxabs")
MAX_FEATURES = 100_000


class IRError(ValueError):
    """The file is not a valid tabular model. The message names the field."""


@dataclass(frozen=True)
class Metadata:
    name: str
    source_framework: str
    task: str
    num_features: int
    num_classes: int
    feature_names: list[str]
    feature_types: list[str]
    class_labels: list[str] = field(default_factory=list)
    source_version: str = ""


@dataclass(frozen=True)
class Imputer:
    fill: np.ndarray            # float64 [features]
    missing_value: float        # NaN, or the number that marks a missing value


@dataclass(frozen=True)
class Scaler:
    center: np.ndarray          # x -> (x - center) / scale
    scale: np.ndarray


@dataclass(frozen=True)
class Linear:
    weights: np.ndarray         # [outputs, features]
    biases: np.ndarray          # [outputs]
    activation: str = "identity"


@dataclass(frozen=True)
class SVM:
    kernel: str
    support_vectors: np.ndarray  # [vectors, features]
    dual: np.ndarray             # [rows of decision values, vectors]
    intercept: np.ndarray
    gamma: float
    coef0: float
    degree: int
    ovo_classes: int = 0         # >0: rows are one-vs-one pairs, outputs are per class


Stage = Imputer | Scaler | Linear | SVM | Forest


@dataclass(frozen=True)
class TabularModel:
    metadata: Metadata
    activation: str
    num_outputs: int
    stages: list[Stage]

    @property
    def model_stage(self) -> Stage:
        return self.stages[-1]

    @property
    def kind(self) -> str:
        return {Forest: "tree_ensemble", Linear: "linear", SVM: "svm"}[type(self.model_stage)]


# ---- small typed readers ----------------------------------------------------------------------

def _obj(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise IRError(f"{where}: must be an object")
    return v


def _int(v: Any, where: str, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
        raise IRError(f"{where}: must be an integer, got {v!r}")
    v = int(v)
    if v < lo or (hi is not None and v > hi):
        raise IRError(f"{where}: must be between {lo} and {hi if hi is not None else 'any'}, got {v}")
    return v


def _num(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise IRError(f"{where}: must be a finite number, got {v!r}")
    return float(v)


def _vec(v: Any, where: str, n: int | None = None, finite: bool = True) -> np.ndarray:
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise IRError(f"{where}: must be a list of numbers") from None
    if a.ndim != 1 or (n is not None and len(a) != n):
        raise IRError(f"{where}: must be a list of {n if n is not None else 'some'} numbers, "
                      f"got shape {list(a.shape)}")
    if finite and not np.all(np.isfinite(a)):
        raise IRError(f"{where}: must hold finite numbers")
    return a


def _mat(v: Any, where: str, cols: int | None = None) -> np.ndarray:
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise IRError(f"{where}: must be a list of equally long lists of numbers") from None
    if a.ndim != 2 or a.shape[0] == 0 or (cols is not None and a.shape[1] != cols):
        raise IRError(f"{where}: must be a non-empty list of lists of {cols if cols is not None else 'n'} "
                      f"numbers, got shape {list(a.shape)}")
    if not np.all(np.isfinite(a)):
        raise IRError(f"{where}: must hold finite numbers")
    return a


def _strs(v: Any, where: str, n: int) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise IRError(f"{where}: must be a list of strings")
    if v and len(v) != n:
        raise IRError(f"{where}: has {len(v)} entries for {n}")
    return list(v)


# ---- sections -------------------------------------------------------------------------------

def _metadata(doc: dict) -> Metadata:
    m = _obj(doc.get("metadata"), "metadata")
    task = m.get("task")
    if task not in TASKS:
        raise IRError(f"metadata.task: must be one of {', '.join(TASKS)}, got {task!r}")
    nf = _int(m.get("num_features"), "metadata.num_features", 1, MAX_FEATURES)
    nc = _int(m.get("num_classes") or 0, "metadata.num_classes", 0, 100_000)
    if task == "multiclass" and nc < 2:
        raise IRError("metadata.num_classes: a multiclass model needs num_classes >= 2")
    labels = _strs(m.get("class_labels"), "metadata.class_labels", nc)
    return Metadata(name=str(m.get("name") or ""), source_framework=str(m.get("source_framework") or ""),
                    task=task, num_features=nf, num_classes=nc,
                    feature_names=_strs(m.get("feature_names"), "metadata.feature_names", nf),
                    feature_types=_strs(m.get("feature_types"), "metadata.feature_types", nf),
                    class_labels=labels, source_version=str(m.get("source_version") or ""))


def _body(stage: dict, kind: str, where: str) -> dict:
    inner = stage.get(kind)
    return _obj(inner, f"{where}.{kind}") if inner is not None else stage


def _imputer(b: dict, nf: int, where: str) -> Imputer:
    fill = _vec(b.get("fill_values"), f"{where}.fill_values", nf)
    mv = b.get("missing_value")
    return Imputer(fill=fill, missing_value=float("nan") if mv is None else _num(mv, f"{where}.missing_value"))


def _scaler(b: dict, nf: int, where: str) -> Scaler:
    method = b.get("method", "standard")
    if method not in SCALER_METHODS:
        raise IRError(f"{where}.method: must be one of {', '.join(SCALER_METHODS)}, got {method!r}")
    get = lambda k: _vec(b.get(k), f"{where}.{k}", nf)  # noqa: E731
    if method in ("standard", "robust"):
        center = get("center") if b.get("center") is not None else np.zeros(nf)
        scale = get("scale") if b.get("scale") is not None else np.ones(nf)
    elif method == "minmax":
        center, hi = get("min"), get("max")
        scale = hi - center
    else:
        center, scale = np.zeros(nf), get("scale")
    # A zero scale leaves the feature unchanged (as scikit-learn does for constant features).
    return Scaler(center=center, scale=np.where(scale == 0, 1.0, scale))


def _linear(b: dict, nf: int, where: str) -> Linear:
    w = _mat(b.get("weights"), f"{where}.weights", nf)
    bias = _vec(b.get("biases", [0.0] * len(w)), f"{where}.biases", len(w))
    act = b.get("activation") or "identity"
    if act not in ACTIVATIONS:
        raise IRError(f"{where}.activation: must be one of {', '.join(ACTIVATIONS)}, got {act!r}")
    return Linear(weights=w, biases=bias, activation=act)


def _svm(b: dict, nf: int, where: str) -> SVM:
    kernel = b.get("kernel")
    if kernel not in KERNELS:
        raise IRError(f"{where}.kernel: must be one of {', '.join(KERNELS)}, got {kernel!r}")
    sv = _mat(b.get("support_vectors"), f"{where}.support_vectors", nf)
    dual = _mat(b.get("dual_coefficients"), f"{where}.dual_coefficients", len(sv))
    intercept = _vec(b.get("intercept"), f"{where}.intercept", len(dual))
    gamma = _num(b.get("gamma", 0.0), f"{where}.gamma")
    if kernel != "linear" and gamma == 0.0 and kernel != "poly":
        raise IRError(f"{where}.gamma: the {kernel} kernel needs a non-zero gamma")
    ovo = 0
    if b.get("multiclass") not in (None, "ovo"):
        raise IRError(f"{where}.multiclass: only 'ovo' is known, got {b.get('multiclass')!r}")
    if b.get("multiclass") == "ovo":
        ovo = _int(b.get("num_classes"), f"{where}.num_classes", 2, 1000)
        if len(dual) != ovo * (ovo - 1) // 2:
            raise IRError(f"{where}.dual_coefficients: one-vs-one over {ovo} classes needs "
                          f"{ovo * (ovo - 1) // 2} rows, got {len(dual)}")
    return SVM(kernel=kernel, support_vectors=sv, dual=dual, intercept=intercept, gamma=gamma,
               coef0=_num(b.get("coef0", 0.0), f"{where}.coef0"),
               degree=_int(b.get("degree", 3), f"{where}.degree", 0, 100), ovo_classes=ovo)


def _forest(b: dict, nf: int, outputs: int, where: str) -> Forest:
    if b.get("num_features") not in (None, 0) and _int(b["num_features"], f"{where}.num_features") > nf:
        raise IRError(f"{where}.num_features: {b['num_features']} is more than metadata.num_features ({nf})")
    try:
        forest = compile_forest(_obj(b.get("nodes"), f"{where}.nodes"), nf, outputs, b.get("base_score", 0.0),
                                b.get("tree_outputs"), b.get("aggregation") or "sum", where)
    except TreeError as e:
        raise IRError(str(e)) from None
    if b.get("num_trees") not in (None, 0) and _int(b["num_trees"], f"{where}.num_trees") != forest.num_trees:
        raise IRError(f"{where}.num_trees: says {b['num_trees']} but tree_starts lists {forest.num_trees}")
    return forest


def stage_outputs(stage: Stage) -> int:
    if isinstance(stage, Forest):
        return stage.num_outputs
    if isinstance(stage, Linear):
        return len(stage.biases)
    if isinstance(stage, SVM):
        return stage.ovo_classes or len(stage.intercept)
    raise TypeError(stage)


def parse(doc: Any) -> TabularModel:
    """Validate a decoded tabular_model.json. Raises IRError naming the bad field."""
    doc = _obj(doc, "document")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise IRError(f"schema_version: must be {SCHEMA_VERSION}, got {doc.get('schema_version')!r}")
    meta = _metadata(doc)
    out = _obj(doc.get("output", {}), "output")
    activation = out.get("activation") or "identity"
    if activation not in ACTIVATIONS:
        raise IRError(f"output.activation: must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    num_outputs = _int(out.get("num_outputs", 1), "output.num_outputs", 1, 100_000)
    if meta.task == "multiclass" and num_outputs != meta.num_classes:
        raise IRError(f"output.num_outputs: a multiclass model has one output per class "
                      f"({meta.num_classes}), got {num_outputs}")
    if activation == "softmax" and num_outputs < 2:
        raise IRError("output.activation: softmax needs at least 2 outputs")
    pipeline = doc.get("pipeline")
    if not isinstance(pipeline, list) or not pipeline:
        raise IRError("pipeline: must be a non-empty list of stages")
    stages: list[Stage] = []
    nf = meta.num_features
    for i, raw in enumerate(pipeline):
        where = f"pipeline[{i}]"
        raw = _obj(raw, where)
        kind = raw.get("type")
        if kind not in MODEL_STAGES + PRE_STAGES:
            raise IRError(f"{where}.type: must be one of {', '.join(MODEL_STAGES + PRE_STAGES)}, got {kind!r}")
        if stages and not isinstance(stages[-1], (Imputer, Scaler)):
            raise IRError(f"{where}: nothing may follow the model stage ({pipeline[i - 1].get('type')})")
        b = _body(raw, kind, where)
        where = f"{where}.{kind}" if raw.get(kind) is not None else where
        if kind == "imputer":
            stages.append(_imputer(b, nf, where))
        elif kind == "scaler":
            stages.append(_scaler(b, nf, where))
        elif kind == "linear":
            stages.append(_linear(b, nf, where))
        elif kind == "svm":
            stages.append(_svm(b, nf, where))
        else:
            stages.append(_forest(b, nf, num_outputs, where))
    if isinstance(stages[-1], (Imputer, Scaler)):
        raise IRError("pipeline: needs a model stage (tree_ensemble, linear or svm) at the end")
    produced = stage_outputs(stages[-1])
    if produced != num_outputs:
        raise IRError(f"output.num_outputs: is {num_outputs} but the {pipeline[-1].get('type')} stage "
                      f"produces {produced}")
    return TabularModel(metadata=meta, activation=activation, num_outputs=num_outputs, stages=stages)


def load_file(path: Path) -> TabularModel:
    """Read and validate a tabular_model.json. Raises IRError (also for unreadable files)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise IRError(f"cannot read {path}: {e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise IRError(f"invalid JSON ({e})") from None
    return parse(doc)


def output_names(model: TabularModel) -> list[str]:
    """A name for each prediction column, for the catalog."""
    m = model.metadata
    if m.task == "multiclass":
        return m.class_labels or [f"class_{i}" for i in range(model.num_outputs)]
    if m.task == "binary_classification" and model.num_outputs == 1:
        positive = m.class_labels[1] if len(m.class_labels) == 2 else "1"
        what = "probability" if model.activation == "sigmoid" else "score"
        return [f"{what}({positive})"]
    if model.num_outputs == 1:
        return ["score" if m.task == "ranking" else "value"]
    return [f"output_{i}" for i in range(model.num_outputs)]


def summary(model: TabularModel) -> dict[str, Any]:
    """Catalog entry: what a client needs to call /ml/v1/predict."""
    m = model.metadata
    names = m.feature_names or [f"f{i}" for i in range(m.num_features)]
    return {"task": m.task, "num_features": m.num_features, "num_classes": m.num_classes,
            "feature_names": names, "feature_types": m.feature_types or ["float"] * m.num_features,
            "num_outputs": model.num_outputs, "outputs": output_names(model), "activation": model.activation,
            "model_type": model.kind, "source_framework": m.source_framework}


def check_file(path: Path) -> dict[str, Any]:
    """Discovery's hook: validate the file, return its catalog summary. Raises IRError."""
    return summary(load_file(path))
