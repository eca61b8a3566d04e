"""XGBoost models -> IR, read from the JSON model format (`Booster.save_model("m.json")`).

The JSON is parsed directly, so importing a .json model needs no xgboost install; a .ubj
(binary JSON) model is converted to JSON through xgboost itself.

XGBoost goes left when `x < split_condition` (x as float32); the IR goes left when
`x <= threshold`, so thresholds become the next float32 below the split condition.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from inferd.runtimes.tabular.importers.common import TreeBuilder, UnsupportedModel, document

# objective -> (task, activation, link that maps base_score to a margin)
_OBJECTIVES = {
    "reg:squarederror": ("regression", "identity", "identity"),
    "reg:squaredlogerror": ("regression", "identity", "identity"),
    "reg:pseudohubererror": ("regression", "identity", "identity"),
    "reg:absoluteerror": ("regression", "identity", "identity"),
    "reg:quantileerror": ("regression", "identity", "identity"),
    "reg:linear": ("regression", "identity", "identity"),
    "reg:logistic": ("regression", "sigmoid", "logit"),
    "binary:logistic": ("binary_classification", "sigmoid", "logit"),
    "binary:logitraw": ("binary_classification", "identity", "identity"),
    "count:poisson": ("regression", "exp", "log"),
    "reg:gamma": ("regression", "exp", "log"),
    "reg:tweedie": ("regression", "exp", "log"),
    "multi:softprob": ("multiclass", "softmax", "identity"),
    "multi:softmax": ("multiclass", "softmax", "identity"),
    "rank:pairwise": ("ranking", "identity", "identity"),
    "rank:ndcg": ("ranking", "identity", "identity"),
    "rank:map": ("ranking", "identity", "identity"),
}


def _floats(text: Any) -> list[float]:
    """base_score is a string: "5E-1", or "[5E-1]" / "[1E0,2E0]" in XGBoost >= 2."""
    s = str(text).strip().strip("[]")
    return [float(v) for v in s.split(",") if v.strip()] or [0.0]


def _margin(values: list[float], link: str) -> list[float]:
    if link == "logit":
        return [math.log(p / (1.0 - p)) for p in values]
    if link == "log":
        return [math.log(p) for p in values]
    return values


def _below(conditions: np.ndarray) -> np.ndarray:
    """`x < c` for float32 x  ==  `x <= the largest float32 below c`."""
    c = conditions.astype(np.float32)
    return np.nextafter(c, np.float32(-np.inf)).astype(np.float64)


def load_json(path: Path) -> dict[str, Any]:
    if path.suffix.lower() == ".ubj":
        try:
            import xgboost
        except ImportError:
            raise UnsupportedModel("reading a .ubj model needs xgboost: pip install 'inferd[ml]', "
                                   "or save the model as .json") from None
        booster = xgboost.Booster()
        booster.load_model(str(path))
        return json.loads(booster.save_raw(raw_format="json"))
    return json.loads(path.read_text())


def looks_like_xgboost(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("learner"), dict)


def convert(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """An XGBoost JSON model document -> IR document."""
    learner = doc["learner"]
    params = learner.get("learner_model_param", {})
    objective = str(learner.get("objective", {}).get("name", ""))
    if objective not in _OBJECTIVES:
        raise UnsupportedModel(f"XGBoost objective {objective!r} is not supported "
                               f"(supported: {', '.join(sorted(_OBJECTIVES))})")
    task, activation, link = _OBJECTIVES[objective]
    gb = learner.get("gradient_booster", {})
    weights = None
    if gb.get("name") == "dart":
        weights = gb.get("weight_drop")
        gb = gb.get("gbtree", {})
    if gb.get("name") != "gbtree":
        raise UnsupportedModel(f"XGBoost booster {gb.get('name')!r} is not supported (gbtree, dart)")
    model = gb["model"]
    if int(params.get("num_target", 1) or 1) > 1:
        raise UnsupportedModel("multi-target XGBoost models are not supported")
    nf = int(params.get("num_feature", 0))
    num_class = int(params.get("num_class", 0) or 0)
    outputs = num_class if task == "multiclass" else 1
    tree_info = model.get("tree_info") or [0] * len(model["trees"])
    b = TreeBuilder()
    for i, tree in enumerate(model["trees"]):
        if int(tree.get("tree_param", {}).get("size_leaf_vector", 1) or 1) > 1:
            raise UnsupportedModel("vector-leaf XGBoost trees are not supported")
        if tree.get("categories_nodes"):
            raise UnsupportedModel("XGBoost categorical splits are not supported")
        left = np.asarray(tree["left_children"], np.int64)
        cond = np.asarray(tree["split_conditions"], np.float64)
        leaf = cond * (float(weights[i]) if weights else 1.0)
        b.add(tree["split_indices"], _below(cond), left, tree["right_children"], leaf,
              np.asarray(tree["default_left"], bool), output=int(tree_info[i]))
    base = _margin(_floats(params.get("base_score", 0.5)), link)
    if len(base) not in (1, outputs):
        raise UnsupportedModel(f"base_score has {len(base)} values for {outputs} outputs")
    base_score: Any = base[0] if outputs == 1 else np.broadcast_to(np.asarray(base), (outputs,)).copy()
    version = ".".join(map(str, doc.get("version", [])))
    return document(name=name, framework="xgboost", version=version, task=task,
                    num_features=nf, num_classes=num_class if task == "multiclass" else (2 if task.startswith("bin")
                                                                                       else 0),
                    activation=activation, num_outputs=outputs, feature_names=learner.get("feature_names") or None,
                    pipeline=[b.stage(nf, base_score, objective=objective, with_outputs=outputs > 1)])

