"""Build the built-in `iris-classifier` predictor: a small random forest trained on
scikit-learn's bundled iris data, converted to the tabular IR by inferd's own importer.

The output is committed as package data (inferd/runtimes/tabular/builtin/iris-classifier/),
so serving it needs only numpy; scikit-learn is needed only to run this script:

    pip install -e '.[ml]' && python scripts/make_iris_predictor.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from sklearn.datasets import load_iris
from sklearn.ensemble import RandomForestClassifier

from inferd.runtimes.tabular import parse, predict
from inferd.runtimes.tabular.importers.sklearn import convert

OUT = Path(__file__).resolve().parents[1] / "inferd/runtimes/tabular/builtin/iris-classifier/tabular_model.json"


def main() -> None:
    iris = load_iris()
    x, y = iris.data, iris.target
    forest = RandomForestClassifier(n_estimators=16, max_depth=4, random_state=0).fit(x, y)
    doc = convert(forest, "iris-classifier")
    meta = doc["metadata"]
    meta["feature_names"] = [n.replace(" (cm)", "_cm").replace(" ", "_") for n in iris.feature_names]
    meta["class_labels"] = list(iris.target_names)
    meta.pop("created_at", None)  # keep the committed file stable across rebuilds
    got = predict(parse(doc), x.astype(np.float32))
    assert np.allclose(got, forest.predict_proba(x), atol=1e-9), "converted model disagrees with scikit-learn"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes); training accuracy "
          f"{(got.argmax(1) == y).mean():.3f}")


if __name__ == "__main__":
    main()
