"""Benchmark: a 100-tree random forest on 10,000 rows.

Measures, in the same run on the same data:
  * scikit-learn's own RandomForestClassifier.predict_proba (n_jobs=None: its default),
  * inferd's vectorised numpy evaluator on the imported IR (all cores, then one thread),
  * the HTTP round trip of POST /ml/v1/predict with the same 10,000 rows: a JSON body
    (orjson fast path) and a binary .npy body (float32), JSON responses, request bodies
    encoded once before timing (the client's own encoding does not count),
  * in-process, the body parsing alone: the orjson path (api/antfly/ml_body.py), the way
    the route parsed it before (FastAPI: json.loads, then the pydantic model, then numpy),
    and pydantic's own JSON parser on the same model (for reference),
and prints rows/s and the ratio inferd / scikit-learn (target >= 1.0x). It also checks
that all give the same probabilities. Not a test: run `python bench/tabular.py`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
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

    # Body parsing alone, in-process: the fast path and the pydantic model it replaced.
    from inferd.api.antfly import ml_body
    from inferd.api.antfly.ml import PredictRequest

    raw = json.dumps({"model": "bench-forest", "input": xte.tolist()}).encode()
    buf = io.BytesIO()
    np.save(buf, x32)
    npy = buf.getvalue()
    p_fast, _ = best(lambda: ml_body.parse_json(raw, rows), a.repeat)
    p_npy, _ = best(lambda: ml_body.parse_npy(npy, [("model", "bench-forest")], rows), a.repeat)
    p_old, _ = best(lambda: np.array(PredictRequest.model_validate(json.loads(raw)).input, dtype=np.float64),
                    a.repeat)
    p_pyd, _ = best(lambda: np.array(PredictRequest.model_validate_json(raw).input, dtype=np.float64), a.repeat)

    # HTTP round trip through a real server
    from tests.server import serve

    json_ct, npy_ct = {"content-type": "application/json"}, {"content-type": "application/x-npy"}
    q = {"model": "bench-forest"}
    with tempfile.TemporaryDirectory() as d:
        write_predictor(doc, Path(d), "bench-forest")
        with serve(ml_dir=d) as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
            r = c.post("/ml/v1/predict", content=raw, headers=json_ct)
            assert r.status_code == 200 and np.allclose(r.json()["predictions"], ref, atol=1e-5)
            r2 = c.post("/ml/v1/predict", content=npy, headers=npy_ct, params=q)
            assert r2.status_code == 200 and r2.json() == r.json()
            http, http_med = best(lambda: c.post("/ml/v1/predict", content=raw, headers=json_ct).raise_for_status(),
                                  a.repeat)
            hnpy, hnpy_med = best(lambda: c.post("/ml/v1/predict", content=npy, headers=npy_ct,
                                                 params=q).raise_for_status(), a.repeat)
            one = json.dumps({"model": "bench-forest", "input": xte[:1].tolist()}).encode()
            single, single_med = best(lambda: c.post("/ml/v1/predict", content=one,
                                                     headers=json_ct).raise_for_status(), 50)
            buf = io.BytesIO()
            np.save(buf, x32[:1])
            one_npy = buf.getvalue()
            single_npy, single_npy_med = best(lambda: c.post("/ml/v1/predict", content=one_npy, headers=npy_ct,
                                                             params=q).raise_for_status(), 50)
    for label, t, med in [("HTTP 10k rows, JSON body", http, http_med), ("HTTP 10k rows, .npy body", hnpy, hnpy_med)]:
        print(f"{label:34s} {t * 1e3:8.1f} {med * 1e3:10.1f} {rows / t:12,.0f} {sk / t:9.2f}x")
    print(f"{'HTTP 1 row, JSON body':34s} {single * 1e3:8.2f} {single_med * 1e3:10.2f}")
    print(f"{'HTTP 1 row, .npy body':34s} {single_npy * 1e3:8.2f} {single_npy_med * 1e3:10.2f}")
    print(f"parse only: orjson path {p_fast * 1e3:.1f} ms, .npy {p_npy * 1e3:.2f} ms, before (json.loads + pydantic) "
          f"{p_old * 1e3:.1f} ms, pydantic validate_json {p_pyd * 1e3:.1f} ms; "
          f"body {len(raw):,} B JSON, {len(npy):,} B .npy")
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")

if __name__ == "__main__":
    main()
