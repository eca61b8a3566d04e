"""scikit-learn estimators and pipelines -> IR. Imports scikit-learn lazily (optional extra).

Output conventions (the same for every framework):
  regression            one column per target, the model's prediction;
  binary_classification one column, P(classes_[1]) (SVC: its decision_function value);
  multiclass            one column per class in classes_ order: predict_proba
                        (SVC: decision_function, one-vs-rest shape).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.runtimes.tabular.importers.common import TreeBuilder, UnsupportedModel, document

_IDENTITY_REG_LOSSES = {"squared_error", "absolute_error", "huber", "quantile"}


def _name(obj: Any) -> str:
    return type(obj).__name__


# ---- preprocessing --------------------------------------------------------------------------

def _preprocess(step: Any, nf: int) -> dict[str, Any]:
    name = _name(step)
    if name == "StandardScaler":
        center = step.mean_ if step.with_mean and step.mean_ is not None else np.zeros(nf)
        scale = step.scale_ if step.with_std and step.scale_ is not None else np.ones(nf)
        return {"type": "scaler", "scaler": {"method": "standard", "center": list(map(float, center)),
                                             "scale": list(map(float, scale))}}
    if name == "RobustScaler":
        center = step.center_ if step.center_ is not None else np.zeros(nf)
        scale = step.scale_ if step.scale_ is not None else np.ones(nf)
        return {"type": "scaler", "scaler": {"method": "robust", "center": list(map(float, center)),
                                             "scale": list(map(float, scale))}}
    if name == "MaxAbsScaler":
        return {"type": "scaler", "scaler": {"method": "maxabs", "scale": list(map(float, step.scale_))}}
    if name == "MinMaxScaler":
        if getattr(step, "clip", False):
            raise UnsupportedModel("MinMaxScaler(clip=True) has no IR equivalent")
        # x * scale_ + min_  ==  (x - (-min_ / scale_)) / (1 / scale_)
        s = np.where(step.scale_ == 0, 1.0, step.scale_)
        return {"type": "scaler", "scaler": {"method": "standard", "center": list(map(float, -step.min_ / s)),
                                             "scale": list(map(float, 1.0 / s))}}
    if name == "SimpleImputer":
        if getattr(step, "add_indicator", False):
            raise UnsupportedModel("SimpleImputer(add_indicator=True) adds columns; not supported")
        stats = np.asarray(step.statistics_, dtype=np.float64)
        if len(stats) != nf or np.isnan(stats).any():
            raise UnsupportedModel("SimpleImputer dropped an all-missing feature; refit with keep_empty_features=True")
        mv = step.missing_values
        body: dict[str, Any] = {"strategy": step.strategy, "fill_values": list(map(float, stats))}
        if mv is not None and not (isinstance(mv, float) and np.isnan(mv)):
            body["missing_value"] = float(mv)
        return {"type": "imputer", "imputer": body}
    raise UnsupportedModel(f"pipeline step {name} is not supported (supported: StandardScaler, MinMaxScaler, "
                           "RobustScaler, MaxAbsScaler, SimpleImputer)")


# ---- trees ----------------------------------------------------------------------------------

def _tree_arrays(tree) -> tuple:
    t = tree.tree_
    dl = getattr(t, "missing_go_to_left", None)
    dl = np.ones(t.node_count, bool) if dl is None else np.asarray(dl).astype(bool)
    return t.feature, t.threshold, t.children_left, t.children_right, dl


def _add_sk_tree(b: TreeBuilder, tree, leaf, output: int = 0) -> None:
    f, thr, lc, rc, dl = _tree_arrays(tree)
    b.add(f, thr, lc, rc, leaf, dl, output=output)


def _classifier_leaves(tree, k: int) -> np.ndarray:
    v = tree.tree_.value[:, 0, :].astype(np.float64)
    v = v / np.maximum(v.sum(1, keepdims=True), 1e-300)  # counts (old versions) or fractions
    return v[:, 1] if k == 2 else v


def _forest(est, nf: int) -> tuple[dict, dict]:
    trees = est.estimators_ if hasattr(est, "estimators_") else [est]
    classifier = hasattr(est, "classes_")
    b = TreeBuilder()
    if classifier:
        k = len(est.classes_)
        if np.ndim(est.classes_) != 1:
            raise UnsupportedModel("multi-output classifiers are not supported")
        for t in trees:
            _add_sk_tree(b, t, _classifier_leaves(t, k))
        task, outputs = ("binary_classification", 1) if k == 2 else ("multiclass", k)
        info = dict(task=task, num_classes=k, activation="identity", num_outputs=outputs, class_labels=est.classes_)
    else:
        outputs = trees[0].tree_.n_outputs
        for t in trees:
            v = t.tree_.value[:, :, 0]
            _add_sk_tree(b, t, v[:, 0] if outputs == 1 else v)
        info = dict(task="regression", num_classes=0, activation="identity", num_outputs=outputs)
    return b.stage(nf, 0.0, objective=_name(est), aggregation="mean"), info


def _gradient_boosting(est, nf: int) -> tuple[dict, dict]:
    if not (est.init_ == "zero" or _name(est.init_) in ("DummyClassifier", "DummyRegressor")):
        raise UnsupportedModel("GradientBoosting with a custom init estimator is not supported")
    base = np.asarray(est._raw_predict_init(np.zeros((1, nf), dtype=np.float32)), dtype=np.float64)[0]
    lr = float(est.learning_rate)
    b = TreeBuilder()
    stages, k = est.estimators_.shape
    for s in range(stages):
        for c in range(k):
            t = est.estimators_[s, c]
            _add_sk_tree(b, t, t.tree_.value[:, 0, 0] * lr, output=c)
    if hasattr(est, "classes_"):
        if est.loss != "log_loss":
            raise UnsupportedModel(f"GradientBoostingClassifier(loss={est.loss!r}) is not supported; use log_loss")
        n = len(est.classes_)
        info = dict(task="binary_classification" if n == 2 else "multiclass", num_classes=n,
                    activation="sigmoid" if n == 2 else "softmax", num_outputs=k, class_labels=est.classes_)
    else:
        if est.loss not in _IDENTITY_REG_LOSSES:
            raise UnsupportedModel(f"GradientBoostingRegressor(loss={est.loss!r}) is not supported")
        info = dict(task="regression", num_classes=0, activation="identity", num_outputs=1)
    return b.stage(nf, base if k > 1 else float(base[0]), objective=est.loss, with_outputs=k > 1), info


def _hist_gradient_boosting(est, nf: int) -> tuple[dict, dict]:
    b = TreeBuilder()
    for it in est._predictors:
        for c, pred in enumerate(it):
            nodes = pred.nodes
            if np.any(nodes["is_categorical"]):
                raise UnsupportedModel("HistGradientBoosting with categorical features is not supported")
            leaf = nodes["is_leaf"].astype(bool)
            b.add(nodes["feature_idx"], nodes["num_threshold"], np.where(leaf, -1, nodes["left"].astype(np.int64)),
                  np.where(leaf, -1, nodes["right"].astype(np.int64)), nodes["value"], nodes["missing_go_to_left"].astype(bool),
                  output=c)
    k = len(est._predictors[0])
    base = np.asarray(est._baseline_prediction, dtype=np.float64).ravel()
    loss = getattr(est, "loss", "")
    if hasattr(est, "classes_"):
        n = len(est.classes_)
        info = dict(task="binary_classification" if n == 2 else "multiclass", num_classes=n,
                    activation="sigmoid" if n == 2 else "softmax", num_outputs=k, class_labels=est.classes_)
    elif loss in ("poisson", "gamma"):
        info = dict(task="regression", num_classes=0, activation="exp", num_outputs=1)
    elif loss in _IDENTITY_REG_LOSSES:
        info = dict(task="regression", num_classes=0, activation="identity", num_outputs=1)
    else:
        raise UnsupportedModel(f"HistGradientBoostingRegressor(loss={loss!r}) is not supported")
    return b.stage(nf, base if k > 1 else float(base[0]), objective=str(loss), with_outputs=k > 1), info


# ---- linear and SVM -------------------------------------------------------------------------

def _linear(est, nf: int) -> tuple[dict, dict]:
    coef = np.atleast_2d(np.asarray(est.coef_, dtype=np.float64))
    intercept = np.broadcast_to(np.asarray(est.intercept_, dtype=np.float64), (coef.shape[0],))
    stage = {"type": "linear", "linear": {"weights": coef.tolist(), "biases": intercept.tolist()}}
    if _name(est) in ("LogisticRegression", "LogisticRegressionCV"):
        n = len(est.classes_)
        if n > 2 and getattr(est, "multi_class", "auto") == "ovr":
            raise UnsupportedModel("one-vs-rest LogisticRegression is not supported; use the multinomial default")
        info = dict(task="binary_classification" if n == 2 else "multiclass", num_classes=n,
                    activation="sigmoid" if n == 2 else "softmax", num_outputs=coef.shape[0], class_labels=est.classes_)
    elif hasattr(est, "classes_"):
        raise UnsupportedModel(f"{_name(est)} is not supported")
    else:
        info = dict(task="regression", num_classes=0, activation="identity", num_outputs=coef.shape[0])
    return stage, info


def _svm(est, nf: int) -> tuple[dict, dict]:
    kernel = est.kernel
    if not isinstance(kernel, str) or kernel not in ("rbf", "linear", "poly", "sigmoid"):
        raise UnsupportedModel(f"SVM kernel {kernel!r} is not supported (rbf, linear, poly, sigmoid)")
    sv = np.asarray(est.support_vectors_, dtype=np.float64)
    body: dict[str, Any] = {"kernel": kernel, "support_vectors": sv.tolist(), "gamma": float(est._gamma),
                            "coef0": float(est.coef0), "degree": int(est.degree)}
    if not hasattr(est, "classes_"):  # SVR, NuSVR
        body.update(dual_coefficients=np.asarray(est.dual_coef_).tolist(), intercept=list(map(float, est.intercept_)))
        return {"type": "svm", "svm": body}, dict(task="regression", num_classes=0, activation="identity",
                                                   num_outputs=1)
    n = len(est.classes_)
    if n == 2:  # scikit-learn already flips signs so that positive means classes_[1]
        body.update(dual_coefficients=np.asarray(est.dual_coef_).tolist(), intercept=list(map(float, est.intercept_)))
        return {"type": "svm", "svm": body}, dict(task="binary_classification", num_classes=2, activation="identity",
                                                   num_outputs=1, class_labels=est.classes_)
    if getattr(est, "decision_function_shape", "ovr") != "ovr":
        raise UnsupportedModel("SVC(decision_function_shape='ovo') is not supported; refit with the 'ovr' default")
    # libsvm's one-vs-one layout: for pair (i, j), class i's vectors use row j-1 of dual_coef_
    # and class j's vectors use row i; a positive decision votes for class i.
    starts = np.concatenate([[0], np.cumsum(est.n_support_)])
    dual = np.zeros((n * (n - 1) // 2, len(sv)))
    p = 0
    for i in range(n):
        for j in range(i + 1, n):
            dual[p, starts[i]:starts[i + 1]] = est.dual_coef_[j - 1, starts[i]:starts[i + 1]]
            dual[p, starts[j]:starts[j + 1]] = est.dual_coef_[i, starts[j]:starts[j + 1]]
            p += 1
    body.update(dual_coefficients=dual.tolist(), intercept=list(map(float, est.intercept_)), multiclass="ovo",
                num_classes=n)
    return {"type": "svm", "svm": body}, dict(task="multiclass", num_classes=n, activation="identity",
                                               num_outputs=n, class_labels=est.classes_)


_FOREST = {"DecisionTreeClassifier", "DecisionTreeRegressor", "ExtraTreeClassifier", "ExtraTreeRegressor",
           "RandomForestClassifier", "RandomForestRegressor", "ExtraTreesClassifier", "ExtraTreesRegressor"}
_GB = {"GradientBoostingClassifier", "GradientBoostingRegressor"}
_HGB = {"HistGradientBoostingClassifier", "HistGradientBoostingRegressor"}
_LINEAR = {"LogisticRegression", "LogisticRegressionCV", "LinearRegression", "Ridge", "RidgeCV", "Lasso",
           "LassoCV", "ElasticNet", "ElasticNetCV", "SGDRegressor", "LinearSVR", "BayesianRidge", "HuberRegressor"}
_SVM = {"SVC", "SVR", "NuSVC", "NuSVR"}


def _model_stage(est, nf: int) -> tuple[dict, dict]:
    name = _name(est)
    if name in _FOREST:
        return _forest(est, nf)
    if name in _GB:
        return _gradient_boosting(est, nf)
    if name in _HGB:
        return _hist_gradient_boosting(est, nf)
    if name in _LINEAR:
        return _linear(est, nf)
    if name in _SVM:
        return _svm(est, nf)
    raise UnsupportedModel(f"scikit-learn estimator {name} is not supported")


def is_sklearn(obj: Any) -> bool:
    return type(obj).__module__.startswith("sklearn.")


def convert(obj: Any, name: str) -> dict[str, Any]:
    """A fitted estimator or Pipeline -> IR document."""
    import sklearn

    steps = [s for _, s in obj.steps if s is not None and s != "passthrough"] if _name(obj) == "Pipeline" else [obj]
    if not steps:
        raise UnsupportedModel("the pipeline is empty")
    first = steps[0]
    nf = getattr(first, "n_features_in_", None)
    if nf is None:
        raise UnsupportedModel(f"{_name(first)} is not fitted")
    features = getattr(first, "feature_names_in_", None)
    pipeline = [_preprocess(s, int(nf)) for s in steps[:-1]]
    final = steps[-1]
    if not hasattr(final, "n_features_in_"):
        raise UnsupportedModel(f"{_name(final)} is not fitted")
    stage, info = _model_stage(final, int(nf))
    pipeline.append(stage)
    return document(name=name, framework="sklearn", version=sklearn.__version__, num_features=int(nf),
                    pipeline=pipeline, feature_names=features, **info)
