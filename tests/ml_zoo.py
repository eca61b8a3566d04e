"""Small real models of every supported family, trained on the spot, with the source
library's own predictions for held-out rows (shared by the tabular tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass
class ZooModel:
    name: str
    model: Any                       # what `inferd ml import` converts (estimator / booster)
    x_test: np.ndarray               # float32-representable held-out rows
    reference: Callable[[np.ndarray], np.ndarray]  # source library's predictions, [rows, outputs]
    kind: str                        # "sklearn" | "xgboost" | "lightgbm"


def _data(seed=0, n=260, f=6, classes=None, nan=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f)).astype(np.float32).astype(np.float64)
    w = rng.normal(size=f)
    score = x @ w + 0.5 * np.sin(3 * x[:, 0])
    if classes is None:
        y = score + 0.1 * rng.normal(size=n)
    else:
        y = np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
    if nan:
        x[rng.random(x.shape) < 0.1] = np.nan
    return x[:200], y[:200], x[200:]


def _proba1(m):
    return lambda x: m.predict_proba(x)[:, 1:2]


def _col(f):
    return lambda x: np.asarray(f(x), dtype=np.float64).reshape(len(x), -1)


def build_zoo(include=("sklearn", "xgboost", "lightgbm")) -> list[ZooModel]:
    out: list[ZooModel] = []
    if "sklearn" in include:
        from sklearn import ensemble, linear_model, svm, tree
        from sklearn.impute import SimpleImputer
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        xb, yb, tb = _data(1, classes=2)
        xm, ym, tm = _data(2, classes=3)
        xr, yr, tr = _data(3)
        xn, yn, tn = _data(4, classes=3, nan=True)
        kw = dict(n_estimators=12, random_state=0)
        cls = [
            ("rf-bin", ensemble.RandomForestClassifier(max_depth=6, **kw), "b"),
            ("rf-multi", ensemble.RandomForestClassifier(**kw), "m"),
            ("et-multi", ensemble.ExtraTreesClassifier(max_depth=7, **kw), "m"),
            ("gb-bin", ensemble.GradientBoostingClassifier(max_depth=3, **kw), "b"),
            ("gb-multi", ensemble.GradientBoostingClassifier(max_depth=2, **kw), "m"),
            ("hgb-bin", ensemble.HistGradientBoostingClassifier(max_iter=15, random_state=0), "b"),
            ("hgb-multi", ensemble.HistGradientBoostingClassifier(max_iter=10, random_state=0), "m"),
            ("dt-multi", tree.DecisionTreeClassifier(max_depth=8, random_state=0), "m"),
            ("logreg-bin", linear_model.LogisticRegression(max_iter=500), "b"),
            ("logreg-multi", make_pipeline(StandardScaler(), linear_model.LogisticRegression(max_iter=500)), "m"),
        ]
        for name, est, t in cls:
            x, y, te = (xb, yb, tb) if t == "b" else (xm, ym, tm)
            est.fit(x, y)
            out.append(ZooModel(name, est, te, _proba1(est) if t == "b" else est.predict_proba, "sklearn"))
        regs = [
            ("rf-reg", ensemble.RandomForestRegressor(max_depth=8, **kw)),
            ("et-reg", ensemble.ExtraTreesRegressor(max_depth=6, **kw)),
            ("gb-reg", ensemble.GradientBoostingRegressor(**kw)),
            ("hgb-reg", ensemble.HistGradientBoostingRegressor(max_iter=15, random_state=0)),
            ("dt-reg", tree.DecisionTreeRegressor(max_depth=6, random_state=0)),
            ("linreg", linear_model.LinearRegression()),
            ("ridge", make_pipeline(StandardScaler(), linear_model.Ridge(alpha=0.5))),
        ]
        for name, est in regs:
            est.fit(xr, yr)
            out.append(ZooModel(name, est, tr, _col(est.predict), "sklearn"))
        for kernel in ("rbf", "linear", "poly", "sigmoid"):
            params = dict(kernel=kernel, gamma=0.1 if kernel == "sigmoid" else "scale", degree=2, coef0=0.5)
            for task, (x, y, te) in (("bin", (xb, yb, tb)), ("multi", (xm, ym, tm))):
                est = make_pipeline(StandardScaler(), svm.SVC(**params)).fit(x, y)
                out.append(ZooModel(f"svc-{kernel}-{task}", est, te, _col(est.decision_function), "sklearn"))
            est = svm.SVR(C=2.0, **params).fit(xr, yr)
            out.append(ZooModel(f"svr-{kernel}", est, tr, _col(est.predict), "sklearn"))
        # missing values: an imputer pipeline, and trees that route NaN themselves
        est = make_pipeline(SimpleImputer(strategy="median"), StandardScaler(),
                            linear_model.LogisticRegression(max_iter=500)).fit(xn, yn)
        out.append(ZooModel("impute-logreg", est, tn, est.predict_proba, "sklearn"))
        est = ensemble.HistGradientBoostingClassifier(max_iter=10, random_state=0).fit(xn, yn)
        out.append(ZooModel("hgb-nan", est, tn, est.predict_proba, "sklearn"))
        est = tree.DecisionTreeRegressor(max_depth=6, random_state=0).fit(xn, yn.astype(float))
        out.append(ZooModel("dt-nan", est, tn, _col(est.predict), "sklearn"))
    if "xgboost" in include:
        import xgboost as xgb

        for name, obj, extra, (x, y, te) in [
                ("xgb-bin", "binary:logistic", {}, _data(5, classes=2)),
                ("xgb-multi", "multi:softprob", {"num_class": 3}, _data(6, classes=3)),
                ("xgb-reg", "reg:squarederror", {}, _data(7)),
                ("xgb-nan", "binary:logistic", {}, _data(8, classes=2, nan=True))]:
            params = {"objective": obj, "max_depth": 4, "eta": 0.3, "seed": 0, "nthread": 1, **extra}
            booster = xgb.train(params, xgb.DMatrix(x, label=y), 15)
            ref = (lambda b: lambda t: b.predict(xgb.DMatrix(t)).reshape(len(t), -1))(booster)
            out.append(ZooModel(name, booster, te, ref, "xgboost"))
    if "lightgbm" in include:
        import lightgbm as lgb

        for name, obj, extra, (x, y, te) in [
                ("lgb-bin", "binary", {}, _data(9, classes=2)),
                ("lgb-multi", "multiclass", {"num_class": 3}, _data(10, classes=3)),
                ("lgb-reg", "regression", {}, _data(11)),
                ("lgb-nan", "regression", {}, _data(12, nan=True))]:
            params = {"objective": obj, "num_leaves": 8, "min_data_in_leaf": 5, "verbose": -1, "seed": 0,
                      "num_threads": 1, **extra}
            booster = lgb.train(params, lgb.Dataset(x, label=y), 15)
            ref = (lambda b: lambda t: b.predict(t).reshape(len(t), -1))(booster)
            out.append(ZooModel(name, booster, te, ref, "lightgbm"))
    return out
