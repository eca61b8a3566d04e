"""Tabular predictors end to end: real scikit-learn / XGBoost / LightGBM models are saved in
their own file formats, converted by `inferd ml import`, served, and their predictions
through HTTP must equal the source library's predict / predict_proba / decision_function."""

from __future__ import annotations

import json
import math

import httpx
import joblib
import numpy as np
import pytest

from inferd.cli import main as cli
from tests.ml_zoo import build_zoo
from tests.server import serve

TOL = 1e-5


def _rows(x: np.ndarray) -> list[list[float | None]]:
    return [[None if math.isnan(v) else float(v) for v in r] for r in x]


@pytest.fixture(scope="module")
def zoo():
    return {z.name: z for z in build_zoo()}


@pytest.fixture(scope="module")
def ml_dir(zoo, tmp_path_factory):
    """Every zoo model saved in its library's file format and imported with the CLI."""
    src = tmp_path_factory.mktemp("src")
    ml = tmp_path_factory.mktemp("ml")
    for z in zoo.values():
        if z.kind == "sklearn":
            path = src / f"{z.name}.joblib"
            joblib.dump(z.model, path)
        elif z.kind == "xgboost":
            path = src / (f"{z.name}.ubj" if z.name == "xgb-multi" else f"{z.name}.json")
            z.model.save_model(str(path))
        else:
            path = src / f"{z.name}.txt"
            z.model.save_model(str(path))
        assert cli(["ml", "import", str(path), "--name", z.name, "--ml-dir", str(ml)]) == 0, z.name
    return ml


@pytest.fixture(scope="module")
def srv(ml_dir):
    with serve(ml_dir=str(ml_dir), max_loaded_models=64) as s:
        yield s


def _predict(c: httpx.Client, name: str, rows) -> httpx.Response:
    return c.post("/ml/v1/predict", json={"model": name, "input": rows})


@pytest.mark.parametrize("kind", ["sklearn", "xgboost", "lightgbm"])
def test_http_predictions_equal_source_library(srv, zoo, kind):
    checked, bad = 0, []
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for z in (z for z in zoo.values() if z.kind == kind):
            r = _predict(c, z.name, _rows(z.x_test))
            assert r.status_code == 200, (z.name, r.text)
            body = r.json()
            assert body["model"] == z.name and body["task"] in ("regression", "binary_classification", "multiclass")
            got, want = np.asarray(body["predictions"]), z.reference(z.x_test)
            if got.shape != want.shape or not np.allclose(got, want, atol=TOL, rtol=0):
                bad.append((z.name, got.shape, want.shape, float(np.abs(got - want).max()) if got.shape == want.shape
                            else None))
            checked += 1
    assert checked >= 4 and not bad, bad


def test_catalog_lists_schema_of_every_predictor(srv, zoo):
    with httpx.Client(base_url=srv.url) as c:
        body = c.get("/ml/v1/predictors").json()
        assert c.get("/ml/v1/models").json() == body == c.get("/ai/v1/predictors").json()
    assert body["object"] == "list" and set(body["predictors"]) == set(zoo)
    gb = body["predictors"]["gb-multi"]
    assert gb["task"] == "multiclass" and gb["num_classes"] == 3 and gb["num_outputs"] == 3
    assert gb["num_features"] == 6 and len(gb["feature_names"]) == 6 and gb["feature_types"] == ["float"] * 6
    assert gb["outputs"] == ["0", "1", "2"] and gb["activation"] == "softmax"
    assert body["predictors"]["xgb-bin"]["outputs"] == ["probability(1)"]
    assert body["predictors"]["lgb-reg"]["task"] == "regression"
    assert body["predictors"]["svc-rbf-multi"]["model_type"] == "svm"
    assert "iris-classifier" not in body["predictors"]  # a configured predictor replaces the built-in


def test_missing_values_follow_imputer_and_default_left(srv, zoo):
    """Rows with NaN: trees route them (default_left), the imputer pipeline fills them; NaN
    may be sent as null or as a JSON NaN literal."""
    with httpx.Client(base_url=srv.url) as c:
        for name in ("xgb-nan", "lgb-nan", "hgb-nan", "dt-nan", "impute-logreg"):
            z = zoo[name]
            x = z.x_test[np.isnan(z.x_test).any(1)]
            assert len(x) > 5
            want = z.reference(x)
            got = np.asarray(_predict(c, name, _rows(x)).json()["predictions"])
            assert np.allclose(got, want, atol=TOL, rtol=0), name
            raw = json.dumps({"model": name, "input": x.tolist()})  # NaN literals
            assert "NaN" in raw
            r = c.post("/ml/v1/predict", content=raw, headers={"content-type": "application/json"})
            assert np.allclose(np.asarray(r.json()["predictions"]), want, atol=TOL, rtol=0), name


def test_max_rows_and_large_batch(srv, zoo):
    z = zoo["rf-multi"]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10_000, 6)).astype(np.float32).astype(np.float64)
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        r = _predict(c, "rf-multi", x.tolist())
        assert r.status_code == 200
        assert np.allclose(np.asarray(r.json()["predictions"]), z.reference(x), atol=TOL, rtol=0)
        r = _predict(c, "rf-multi", x.tolist() + [x[0].tolist()])
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "PAYLOAD_TOO_LARGE" and "10000" in r.json()["message"]


@pytest.mark.parametrize("rows, status, code, text", [
    ([[1.0] * 6, [1.0] * 5], 400, "INVALID_REQUEST", "input[1] has 5 values; the model takes exactly 6"),
    ([[1.0] * 7], 400, "INVALID_REQUEST", "exactly 6 features"),
    ([], 400, "INVALID_REQUEST", "at least one row"),
    ([[1.0] * 5 + ["abc"]], 400, "INVALID_REQUEST", "input.0.5"),
    ([[1.0] * 5 + [1e39]], 400, "INVALID_REQUEST", "out of float32 range"),
])
def test_bad_rows_are_400(srv, rows, status, code, text):
    r = httpx.post(srv.url + "/ml/v1/predict", json={"model": "rf-bin", "input": rows})
    assert r.status_code == status, r.text
    assert r.json()["error"] == code and text in r.json()["message"], r.json()


def test_missing_value_without_imputer_is_400_for_linear_models(srv):
    r = httpx.post(srv.url + "/ml/v1/predict", json={"model": "linreg", "input": [[1.0, None, 0, 0, 0, 0]]})
    assert r.status_code == 400 and "input[0][1] is missing" in r.json()["message"]
    r = httpx.post(srv.url + "/ml/v1/predict",
                   content='{"model": "ridge", "input": [[1, 2, 3, 4, Infinity, 0]]}',
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and "infinite" in r.json()["message"]


def test_unknown_model_and_wrong_kind(srv):
    r = httpx.post(srv.url + "/ml/v1/predict", json={"model": "ghost", "input": [[1.0]]})
    assert r.status_code == 404 and r.json()["error"] == "MODEL_NOT_FOUND" and "'ghost'" in r.json()["message"]
    r = httpx.post(srv.url + "/ml/v1/predict", json={"model": "fixed", "input": [[1.0]]})
    assert r.status_code == 400 and r.json()["error"] == "MODEL_NOT_SUPPORTED"
    r = httpx.post(srv.url + "/ml/v1/predict", json={"input": [[1.0]]})
    assert r.status_code == 400 and "'model' is required" in r.json()["message"]


def test_models_load_lazily_and_are_evicted_lru(ml_dir):
    with serve(ml_dir=str(ml_dir), max_loaded_models=2) as s:
        reg = s.service.registry
        assert not reg.loaded
        with httpx.Client(base_url=s.url) as c:
            for name in ("linreg", "rf-reg", "dt-reg"):
                assert _predict(c, name, [[0.5] * 6]).status_code == 200
            assert set(reg.loaded) == {"rf-reg", "dt-reg"}  # linreg, least recently used, went first
            assert c.get("/ml/v1/predictors").json()["predictors"]["dt-reg"]["loaded"] is True
