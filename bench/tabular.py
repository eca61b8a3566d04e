"""Benchmark: a 100-tree random forest on 10,000 rows.

Measures, in the same run on the same data:
  * scikit-learn's own RandomForestClassifier.predict_proba (n_jobs=None: its default),
  * inferd's vectorised numpy evaluator on the imported IR (all cores, then one thread),
  * the HTTP round trip of POST /ml/v1/predict with the same 10,000 rows (JSON both ways),
and prints rows/s and the ratio inferd / scikit-learn (target >= 1.0x). It also checks
that both give the same probabilities. Not a test: run `python bench/tabular.py`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inferd.runtimes.tabular import parse, predict  # noqa: E402
from inferd.runtimes.tabular.importers import convert_object, write_predictor  # noqa: E402
from inferd.runtimes.tabular.trees import set_threads  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--train-rows", type=int, default=5_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()

    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    x, y = make_classification(n_samples=a.train_rows + a.rows, n_features=a.features, n_informative=10,
                               n_classes=3, random_state=0)
    x = x.astype(np.float32).astype(np.float64)
    xtr, ytr, xte = x[:a.train_rows], y[:a.train_rows], x[a.train_rows:]
    forest = RandomForestClassifier(n_estimators=a.trees, random_state=0).fit(xtr, ytr)
    doc = convert_object(forest, "bench-forest")
    model = parse(doc)
    nodes = len(doc["pipeline"][0]["tree_ensemble"]["nodes"]["feature_index"])
    x32 = xte.astype(np.float32)
    print(f"forest: {a.trees} trees, {nodes} nodes, depth {model.model_stage.depth}; "
          f"{a.rows} rows x {a.features} features, 3 classes")

    ref = forest.predict_proba(xte)
    got = predict(model, x32)
    print(f"max |inferd - sklearn| = {np.abs(got - ref).max():.2e}")

    sk, sk_med = best(lambda: forest.predict_proba(xte), a.repeat)
    ours, ours_med = best(lambda: predict(model, x32), a.repeat)
    set_threads(1)
    ours1, ours1_med = best(lambda: predict(model, x32), a.repeat)
    set_threads(None)
    rows = a.rows
    print(f"{'engine':34s} {'best ms':>8s} {'median ms':>10s} {'rows/s':>12s} {'vs sklearn':>10s}")
    for label, t, med in [("scikit-learn predict_proba", sk, sk_med), ("inferd evaluator (all cores)", ours, ours_med),
                          ("inferd evaluator (1 thread)", ours1, ours1_med)]:
        print(f"{label:34s} {t * 1e3:8.1f} {med * 1e3:10.1f} {rows / t:12,.0f} {sk / t:9.2f}x")

    # HTTP round trip through a real server
    from tests.server import serve

    with tempfile.TemporaryDirectory() as d:
        write_predictor(doc, Path(d), "bench-forest")
        body = {"model": "bench-forest", "input": xte.tolist()}
        with serve(ml_dir=d) as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
            r = c.post("/ml/v1/predict", json=body)
            assert r.status_code == 200 and np.allclose(r.json()["predictions"], ref, atol=1e-5)
            http, http_med = best(lambda: c.post("/ml/v1/predict", json=body).raise_for_status(), a.repeat)
            one = {"model": "bench-forest", "input": xte[:1].tolist()}
            single, single_med = best(lambda: c.post("/ml/v1/predict", json=one).raise_for_status(), 50)
    print(f"{'HTTP POST /ml/v1/predict, 10k rows':34s} {http * 1e3:8.1f} {http_med * 1e3:10.1f} {rows / http:12,.0f}"
          f" {sk / http:9.2f}x")
    print(f"{'HTTP POST /ml/v1/predict, 1 row':34s} {single * 1e3:8.2f} {single_med * 1e3:10.2f}")


if __name__ == "__main__":
    main()
