"""The tabular IR: validation (clear errors, reported at discovery without breaking the
other predictors), evaluation semantics on hand-written models, the built-in iris
classifier, and the `inferd ml import` command's errors."""

from __future__ import annotations

import copy
import json

import httpx
import numpy as np
import pytest

from inferd.cli import main as cli
from inferd.registry.discovery import Discovery, scan_ml_dir
from inferd.runtimes.tabular import IRError, parse, predict
from tests.server import serve

# Two stumps on feature 0 and 1 (left when x <= threshold), Antfly's layout: global node
# indices, tree_starts give the roots. Tree 1 sends NaN right (default_left false).
STUMPS = {
    "schema_version": 1,
    "metadata": {"name": "stumps", "source_framework": "hand", "task": "regression", "num_features": 2,
                 "feature_names": ["a", "b"]},
    "output": {"activation": "identity", "num_outputs": 1},
    "pipeline": [{"type": "tree_ensemble", "tree_ensemble": {
        "base_score": 0.5, "num_trees": 2, "num_features": 2, "max_depth": 1,
        "nodes": {"feature_index": [0, -1, -1, 1, -1, -1],
                  "threshold": [1.0, 0, 0, 2.0, 0, 0],
                  "left_child": [1, -1, -1, 4, -1, -1],
                  "right_child": [2, -1, -1, 5, -1, -1],
                  "leaf_value": [0, 10, 20, 0, 100, 200],
                  "default_left": [True, False, False, False, False, False],
                  "tree_starts": [0, 3]}}}],
}


def _doc(**changes):
    d = copy.deepcopy(STUMPS)
    for path, value in changes.items():
        node = d
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[keys[-1]] = value
    return d


def test_tree_semantics_threshold_and_nan():
    m = parse(STUMPS)
    x = np.array([[1.0, 2.0], [1.0000001, 2.0000002], [np.nan, np.nan], [0.0, 3.0]], np.float32)
    assert predict(m, x)[:, 0].tolist() == [110.5, 220.5, 210.5, 210.5]


def test_activations_linear_and_preprocessing():
    doc = {"schema_version": 1,
           "metadata": {"task": "multiclass", "num_features": 2, "num_classes": 3},
           "output": {"activation": "softmax", "num_outputs": 3},
           "pipeline": [{"type": "imputer", "imputer": {"strategy": "constant", "fill_values": [1.0, 2.0]}},
                        {"type": "scaler", "scaler": {"method": "minmax", "min": [0.0, 0.0], "max": [2.0, 4.0]}},
                        {"type": "linear", "linear": {"weights": [[1, 0], [0, 1], [0, 0]], "biases": [0, 0, 0]}}]}
    got = predict(parse(doc), np.array([[np.nan, 4.0]], np.float32))[0]
    e = np.exp([0.5, 1.0, 0.0])
    assert np.allclose(got, e / e.sum())


@pytest.mark.parametrize("doc, text", [
    ({"schema_version": 2}, "schema_version: must be 1"),
    (_doc(metadata__task="clustering"), "metadata.task: must be one of"),
    (_doc(metadata__num_features=0), "metadata.num_features"),
    (_doc(output__activation="relu"), "output.activation"),
    (_doc(pipeline=[{"type": "linear", "linear": {"weights": [[1, 0], [0, 1]], "biases": [0, 0]}}]),
     "output.num_outputs: is 1 but the linear stage produces 2"),
    (_doc(pipeline=[{"type": "linear", "linear": {"weights": [[1, 0, 3]], "biases": [0]}}]),
     "pipeline[0].linear.weights: must be a non-empty list of lists of 2 numbers"),
    (_doc(pipeline=[{"type": "svm", "svm": {"kernel": "cubic"}}]), "pipeline[0].svm.kernel"),
    (_doc(pipeline=[{"type": "scaler", "scaler": {"center": [0, 0], "scale": [1, 1]}}]), "needs a model stage"),
    (_doc(pipeline=[]), "pipeline: must be a non-empty list"),
    (_doc(pipeline__0__type="forest"), "pipeline[0].type: must be one of"),
    (_doc(pipeline__0__tree_ensemble__nodes__left_child=[1, -1, -1, 9, -1, -1]), "left_child[3]: child 9 out of range"),
    (_doc(pipeline__0__tree_ensemble__nodes__left_child=[0, -1, -1, 4, -1, -1]), "reached twice"),
    (_doc(pipeline__0__tree_ensemble__nodes__feature_index=[5, -1, -1, 1, -1, -1]), "feature 5 is out of range"),
    (_doc(pipeline__0__tree_ensemble__nodes__threshold=[1.0, 0]), "threshold: must be a flat array of 6 numbers"),
    (_doc(pipeline__0__tree_ensemble__nodes__tree_starts=[0, 7]), "tree_starts: root index out of range"),
    (_doc(pipeline__0__tree_ensemble__num_trees=3), "num_trees: says 3"),
    (_doc(metadata__feature_names=["a"]), "metadata.feature_names: has 1 entries for 2"),
])
def test_malformed_ir_is_rejected_with_the_field_named(doc, text):
    with pytest.raises(IRError) as e:
        parse(doc)
    assert text in str(e.value)


def test_discovery_reports_bad_files_and_serves_the_rest(tmp_path, capsys):
    good = tmp_path / "good"
    good.mkdir()
    (good / "tabular_model.json").write_text(json.dumps(STUMPS))
    for name, text in [("broken-json", "{not json"), ("bad-tree", json.dumps(_doc(
            pipeline__0__tree_ensemble__nodes__right_child=[2, -1, -1, 99, -1, -1]))),
            ("bad name!", json.dumps(STUMPS))]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "tabular_model.json").write_text(text)
    (tmp_path / "empty").mkdir()
    from inferd.runtimes.tabular import check_file

    found = Discovery()
    scan_ml_dir(tmp_path, found, check_file)  # the checker the service passes to discovery
    assert [s.name for s in found.specs] == ["good"]
    assert found.specs[0].manifest["tabular"]["feature_names"] == ["a", "b"]
    problems = "\n".join(found.problems)
    assert "broken-json: invalid tabular_model.json: invalid JSON" in problems
    assert "bad-tree: invalid tabular_model.json: pipeline[0].tree_ensemble.nodes.right_child[3]" in problems
    assert "bad name!: predictor names are [A-Za-z0-9_-]" in problems and "empty: no tabular_model.json" in problems
    assert cli(["models", "--ml-dir", str(tmp_path), "--models-dir", str(tmp_path / "none"), "--no-builtins"]) == 0
    out = capsys.readouterr()
    assert "good" in out.out and "predictor" in out.out and "bad-tree: invalid tabular_model.json" in out.err
    with serve(ml_dir=str(tmp_path)) as s, httpx.Client(base_url=s.url) as c:
        assert list(c.get("/ml/v1/predictors").json()["predictors"]) == ["good"]
        assert c.post("/ml/v1/predict", json={"model": "good", "input": [[0, 0]]}).json()["predictions"] == [[110.5]]
        r = c.post("/ml/v1/predict", json={"model": "bad-tree", "input": [[0, 0]]})
        assert r.status_code == 404 and r.json()["error"] == "MODEL_NOT_FOUND"


def test_builtin_iris_classifier_is_served_when_no_predictor_is_configured():
    iris = [([5.1, 3.5, 1.4, 0.2], 0), ([7.0, 3.2, 4.7, 1.4], 1), ([6.3, 3.3, 6.0, 2.5], 2),
            ([4.9, 3.0, 1.4, 0.2], 0), ([5.7, 2.8, 4.1, 1.3], 1), ([7.7, 3.8, 6.7, 2.2], 2)]
    with serve(builtins=True) as s, httpx.Client(base_url=s.url) as c:
        entry = c.get("/ml/v1/predictors").json()["predictors"]["iris-classifier"]
        assert entry["task"] == "multiclass" and entry["num_features"] == 4
        assert entry["outputs"] == ["setosa", "versicolor", "virginica"]
        assert entry["feature_names"][0] == "sepal_length_cm"
        r = c.post("/ml/v1/predict", json={"model": "iris-classifier", "input": [x for x, _ in iris]})
        p = np.asarray(r.json()["predictions"])
        assert r.json()["task"] == "multiclass" and np.allclose(p.sum(1), 1.0)
        assert p.argmax(1).tolist() == [y for _, y in iris] and p.max() > 0.9


def test_ml_import_errors(tmp_path, capsys):
    bad = tmp_path / "model.txt"
    bad.write_text("hello")
    assert cli(["ml", "import", str(bad), "--name", "x", "--ml-dir", str(tmp_path / "ml")]) == 1
    assert "unknown model format" in capsys.readouterr().err
    ir = tmp_path / "ir.json"
    ir.write_text(json.dumps(STUMPS))
    assert cli(["ml", "import", str(ir), "--name", "../evil", "--ml-dir", str(tmp_path / "ml")]) == 1
    assert "invalid predictor name" in capsys.readouterr().err
    assert cli(["ml", "import", str(ir), "--name", "stumps", "--ml-dir", str(tmp_path / "ml")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert cli(["ml", "import", str(ir), "--name", "stumps", "--ml-dir", str(tmp_path / "ml")]) == 1
    assert "--force" in capsys.readouterr().err
    ir.write_text(json.dumps(_doc(metadata__task="nope")))
    assert cli(["ml", "import", str(ir), "--name", "s2", "--ml-dir", str(tmp_path / "ml")]) == 1
    assert "metadata.task" in capsys.readouterr().err and not (tmp_path / "ml" / "s2").exists()
