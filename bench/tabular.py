"""Benchmark: a 100-tree random forest on 10,000 rows, scikit-learn in-process vs inferd.

Measured in the same run on the same data, in interleaved rounds (best of `--repeat` calls
per round; the ratio per round is taken against scikit-learn of the same round):
  * scikit-learn's own RandomForestClassifier.predict_proba (n_jobs=None: its default),
  * inferd's vectorised numpy evaluator on the imported IR (all threads, then one thread),
  * the stages of a request, in-process and each on its own: parsing the JSON body
    (api/antfly/ml_body.py: orjson, then numpy), parsing the .npy body, the float32 check
    (to_matrix), the evaluation, and encoding the response (orjson from numpy),
  * the HTTP round trip of POST /ml/v1/predict against `inferd serve` in its own process
    (uvloop, httptools: as deployed), with a JSON body and a binary .npy body (float32),
    bodies encoded once before timing, on a client with TCP_NODELAY,
  * one row over HTTP, with TCP_NODELAY and with httpx's defaults: httpx writes the headers
    and the body of a request in two writes, and without TCP_NODELAY the second waits for the
    first one's ACK, which Linux delays up to 40 ms on a connection that has carried traffic
    (Nagle's algorithm meeting delayed ACKs). That, not the server, was the 44 ms one-row
    figure an earlier version of this script printed,
  * what a plain script's call costs, `httpx.post(json={"input": x.tolist()})` then
    `r.json()`, and the client's own share of it (tolist + json.dumps, json of the answer):
    the figure a user who times such a call sees, and where an outside 314 ms came from.
It checks that every way gives scikit-learn's probabilities. Not a test:
`python bench/tabular.py [--rounds R] [--repeat K] [--baseline-src DIR]`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import InferdServer  # noqa: E402
from inferd.runtimes.tabular import parse, predict, to_matrix  # noqa: E402
from inferd.runtimes.tabular.importers import convert_object, write_predictor  # noqa: E402
from inferd.runtimes.tabular.trees import set_threads  # noqa: E402

JSON_CT, NPY_CT = {"content-type": "application/json"}, {"content-type": "application/x-npy"}


def best(fn: Callable[[], object], repeat: int) -> float:
    """Fastest of `repeat` calls, seconds: outside load only ever makes a call slower."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def nodelay_client(url: str) -> httpx.Client:
    """An httpx client whose sockets send at once (TCP_NODELAY), as curl's and urllib3's do."""
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.Client(base_url=url, timeout=120, transport=transport)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--train-rows", type=int, default=5_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5, help="calls per measurement per round; the fastest is kept")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of scikit-learn and HTTP")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the server's --threads")
    ap.add_argument("--baseline-src", help="an inferd source tree (git archive of another commit) served beside")
    a = ap.parse_args()

    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    from inferd.api.antfly import ml_body
    from inferd.api.antfly.ml import predict_response
    from inferd.api.fastjson import dumps
    from inferd.service.tabular import PredictResult

    load0 = os.getloadavg()[0]
    x, y = make_classification(n_samples=a.train_rows + a.rows, n_features=a.features, n_informative=10,
                               n_classes=3, random_state=0)
    x = x.astype(np.float32).astype(np.float64)
    xtr, ytr, xte = x[:a.train_rows], y[:a.train_rows], x[a.train_rows:]
    forest = RandomForestClassifier(n_estimators=a.trees, random_state=0).fit(xtr, ytr)
    doc = convert_object(forest, "bench-forest")
    model = parse(doc)
    nodes = len(doc["pipeline"][0]["tree_ensemble"]["nodes"]["feature_index"])
    x32 = xte.astype(np.float32)
    rows, k = a.rows, a.repeat
    print(f"forest: {a.trees} trees, {nodes} nodes, depth {model.model_stage.depth}; "
          f"{rows} rows x {a.features} features, 3 classes; CPU: {cpu_name()}, {os.cpu_count()} cores")

    ref = forest.predict_proba(xte)
    got = predict(model, x32)
    print(f"max |inferd - sklearn| = {np.abs(got - ref).max():.2e}")

    # ---- in-process: the evaluator, and each stage of a request on its own ----------------
    raw = json.dumps({"model": "bench-forest", "input": xte.tolist()}).encode()
    npy = npy_bytes(x32)
    stage = {
        "scikit-learn predict_proba": best(lambda: forest.predict_proba(xte), k),
        "inferd evaluator (all threads)": best(lambda: predict(model, x32), k),
    }
    set_threads(1)
    stage["inferd evaluator (1 thread)"] = best(lambda: predict(model, x32), k)
    set_threads(None)
    parsed = ml_body.parse_json(raw, rows)
    result = PredictResult("bench-forest", "classification", got)
    stage["parse JSON body (orjson + numpy)"] = best(lambda: ml_body.parse_json(raw, rows), k)
    stage["parse .npy body"] = best(lambda: ml_body.parse_npy(npy, [("model", "bench-forest")], rows), k)
    stage["float32 check (to_matrix)"] = best(lambda: to_matrix(parsed.x, a.features), k)
    stage["encode response (orjson)"] = best(lambda: dumps(predict_response(result)), k)
    body_out = dumps(predict_response(result))

    # ---- HTTP against `inferd serve` in its own process -------------------------------------
    with tempfile.TemporaryDirectory() as d:
        write_predictor(doc, Path(d), "bench-forest")
        servers = {"inferd": InferdServer(a.threads, builtins=False, ml_dir=d)}
        if a.baseline_src:
            servers["baseline"] = InferdServer(a.threads, builtins=False, ml_dir=d, src=a.baseline_src)
        try:
            res = http_rounds(servers, forest, xte, raw, npy, ref, a.rounds, k)
            one = one_row(servers["inferd"].url, xte, x32)
            plain = plain_client(servers["inferd"].url, xte, ref, k)
        finally:
            for s in servers.values():
                s.close()
        # The way an earlier version of this script served: uvicorn in a thread of this process
        # (the tests' server), sharing the interpreter with the client.
        from tests.server import serve

        with serve(ml_dir=d) as srv:
            inproc = one_row(srv.url, xte, x32)

    sk_best = min(res["sklearn"])
    print(f"\n{'in-process':40s} {'best ms':>8s} {'rows/s':>12s} {'vs sklearn':>10s}")
    for label, t in stage.items():
        print(f"{label:40s} {t * 1e3:8.2f} {rows / t:12,.0f} {stage['scikit-learn predict_proba'] / t:9.2f}x")
    print(f"bodies: JSON {len(raw):,} B, .npy {len(npy):,} B, response {len(body_out):,} B")

    print(f"\nHTTP POST /ml/v1/predict, {a.rounds} rounds x best of {k} (ms per round; ratio = scikit-learn "
          "time / HTTP time, per round, median)")
    print(f"  scikit-learn in-process: {fmt(res['sklearn'])}")
    for who in servers:
        for body, target in (("json", 0.5), ("npy", 0.8)):
            key = f"{who} {body}"
            ratios = [s / h for s, h in zip(res["sklearn"], res[key])]
            print(f"  {who:8s} {body:4s} body: {fmt(res[key])}   best {rows / min(res[key]):,.0f} rows/s, "
                  f"ratio {statistics.median(ratios):.2f}x (best/best {sk_best / min(res[key]):.2f}x; "
                  f"target >= {target}x)")
    print("first request after the start, the model loading on it (JSON body): "
          + ", ".join(f"{who} {res[f'{who} first'][0] * 1e3:.0f} ms" for who in servers))
    print(f"\none row over HTTP (best / median of {one['n']}): JSON {one['json']}, .npy {one['npy']} with "
          f"TCP_NODELAY; httpx defaults after a 10,000-row call: JSON {one['json_default']}; a server in a "
          f"thread of this process (the old way): JSON {inproc['json']}, .npy {inproc['npy']}, "
          f"httpx defaults {inproc['json_default']}")
    print(f"a plain client, httpx.post(json=...) + r.json(): {plain['call'] * 1e3:.1f} ms per call, of which "
          f"the client's own x.tolist() + json.dumps {plain['encode'] * 1e3:.1f} ms and r.json() "
          f"{plain['decode'] * 1e3:.1f} ms; the server's share {(plain['call'] - plain['encode'] - plain['decode']) * 1e3:.1f} ms")
    print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")


def http_rounds(servers: dict[str, InferdServer], forest, xte, raw: bytes, npy: bytes, ref, rounds: int,
                k: int) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {"sklearn": []}
    clients = {who: nodelay_client(s.url) for who, s in servers.items()}
    q = {"model": "bench-forest"}
    try:
        for who, c in clients.items():  # warm: the model loads on its first request
            t0 = time.perf_counter()
            r = c.post("/ml/v1/predict", content=raw, headers=JSON_CT)
            res[f"{who} first"] = [time.perf_counter() - t0]
            assert r.status_code == 200, r.text[:300]
            assert np.allclose(np.array(r.json()["predictions"]), ref, atol=1e-5), who
            r2 = c.post("/ml/v1/predict", content=npy, headers=NPY_CT, params=q)
            assert r2.status_code == 200 and r2.content == r.content, who
        for _ in range(rounds):
            res["sklearn"].append(best(lambda: forest.predict_proba(xte), k))
            for who, c in clients.items():
                res.setdefault(f"{who} json", []).append(
                    best(lambda c=c: c.post("/ml/v1/predict", content=raw, headers=JSON_CT).raise_for_status(), k))
                res.setdefault(f"{who} npy", []).append(
                    best(lambda c=c: c.post("/ml/v1/predict", content=npy, headers=NPY_CT,
                                            params=q).raise_for_status(), k))
    finally:
        for c in clients.values():
            c.close()
    return res


def one_row(url: str, xte, x32, n: int = 50) -> dict:
    one = json.dumps({"model": "bench-forest", "input": xte[:1].tolist()}).encode()
    one_npy = npy_bytes(x32[:1])
    big = json.dumps({"model": "bench-forest", "input": xte.tolist()}).encode()
    out: dict = {"n": n}

    def timed(c: httpx.Client, **kw) -> str:
        c.post("/ml/v1/predict", content=big, headers=JSON_CT).raise_for_status()  # traffic first
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            c.post("/ml/v1/predict", **kw).raise_for_status()
            ts.append(time.perf_counter() - t0)
        return f"{min(ts) * 1e3:.2f} / {statistics.median(ts) * 1e3:.2f} ms"

    with nodelay_client(url) as c:
        out["json"] = timed(c, content=one, headers=JSON_CT)
        out["npy"] = timed(c, content=one_npy, headers=NPY_CT, params={"model": "bench-forest"})
    with httpx.Client(base_url=url, timeout=60) as c:
        out["json_default"] = timed(c, content=one, headers=JSON_CT)
    return out


def plain_client(url: str, xte, ref, k: int) -> dict[str, float]:
    """What a script that calls the API the obvious way pays, and the client's part of it."""
    with httpx.Client(base_url=url, timeout=120) as c:
        def call():
            r = c.post("/ml/v1/predict", json={"model": "bench-forest", "input": xte.tolist()})
            return r.json()["predictions"]

        assert np.allclose(np.array(call()), ref, atol=1e-5)
        text = c.post("/ml/v1/predict", json={"model": "bench-forest", "input": xte.tolist()}).text
        return {"call": best(call, k),
                "encode": best(lambda: json.dumps({"model": "bench-forest", "input": xte.tolist()}).encode(), k),
                "decode": best(lambda: json.loads(text), k)}


def fmt(ts: list[float]) -> str:
    return ", ".join(f"{t * 1e3:.1f}" for t in ts)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
