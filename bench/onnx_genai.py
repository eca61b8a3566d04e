"""ONNX generator benchmark (onnxruntime-genai) on an onnxruntime-genai model folder (default: the
tiny test fixture). Prints tokens/s measured in one run, interleaved rounds, greedy, EOS ignored:

1. single stream: inferd's scheduler (runtimes/onnx_genai + scheduling/genai.py, the path every
   face uses after templating) vs a bare `og.Generator` loop on the same folder (the peer);
2. N concurrent streams (--concurrency, default 4): aggregate tokens/s of inferd's scheduler (one
   og.Engine, N rows per forward pass) vs N bare `og.Generator` loops run one after the other
   (what serving without batching costs), and the forward-pass sizes the scheduler recorded.

Not a test; numbers depend on the machine and its load (hold the shared lock:
`flock /work/wt/bench.lock python bench/onnx_genai.py`).

usage: python bench/onnx_genai.py [--model DIR] [--threads 1] [--new-tokens 128] [--concurrency 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

import numpy as np


def load(model: Path, threads: int, parallel: int):
    from inferd.kinds.generator import load_onnx
    from inferd.models import ModelKind, ModelSpec
    from inferd.runtimes.options import RuntimeOptions

    spec = ModelSpec(name="bench", kind=ModelKind.GENERATOR, format="onnx", path=model, source="bench")
    return load_onnx(spec, RuntimeOptions(threads=threads, parallel=parallel))


def run_inferd(handle, prompts: list[list[int]], new: int) -> tuple[float, int]:
    from inferd.scheduling.jobs import Job
    from inferd.types import SamplingParams

    done = [threading.Event() for _ in prompts]
    counts = [0] * len(prompts)

    def sink(i):
        def put(d):
            counts[i] += len(d.tokens)
            if d.finish_reason is not None or d.error is not None:
                done[i].set()
        return put

    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        sampler = handle.runtime.make_sampler(SamplingParams(temperature=0.0, ignore_eos=True))
        handle.scheduler.submit(Job(prompt=p, sampler=sampler, max_tokens=new, sink=sink(i)))
    for e in done:
        e.wait(600)
    return time.perf_counter() - t0, sum(counts)


def run_peer(model, prompts: list[list[int]], new: int) -> tuple[float, int]:
    import onnxruntime_genai as og

    t0, n = time.perf_counter(), 0
    for p in prompts:
        gp = og.GeneratorParams(model)
        gp.set_search_options(max_length=len(p) + new, min_length=len(p) + new, do_sample=False)
        g = og.Generator(model, gp)
        g.append_tokens(np.asarray(p, dtype=np.int32))
        while not g.is_done():
            g.generate_next_token()
            n += 1
        del g
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tests/fixtures/genai/tiny-llama")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import onnxruntime_genai as og

    folder = Path(a.model)
    handle = load(folder, a.threads, a.concurrency)
    cfg = og.Config(str(folder))
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": a.threads}}}}))
    peer = og.Model(cfg)
    rt = handle.runtime
    prompts = [rt.tokenize(f"prompt number {i}: the cat sat on the mat", add_special=False)
               for i in range(a.concurrency)]
    rows: dict[str, list[float]] = {k: [] for k in ("inferd 1", "peer 1", f"inferd {a.concurrency}",
                                                     f"peer {a.concurrency} (serial)")}
    for _ in range(a.rounds):  # interleaved: both sides see the same machine load
        for key, fn in ((f"inferd 1", lambda: run_inferd(handle, prompts[:1], a.new_tokens)),
                        ("peer 1", lambda: run_peer(peer, prompts[:1], a.new_tokens)),
                        (f"inferd {a.concurrency}", lambda: run_inferd(handle, prompts, a.new_tokens)),
                        (f"peer {a.concurrency} (serial)", lambda: run_peer(peer, prompts, a.new_tokens))):
            secs, n = fn()
            rows[key].append(n / secs)
    print(f"{'run':28s} tok/s (median of {a.rounds})")
    for k, v in rows.items():
        print(f"{k:28s} {statistics.median(v):10.1f}")
    single = statistics.median(rows["inferd 1"]) / statistics.median(rows["peer 1"])
    batched = statistics.median(rows[f"inferd {a.concurrency}"]) / statistics.median(rows[f"peer {a.concurrency} (serial)"])
    print(f"single stream inferd/peer: {single:.2f}x; {a.concurrency} streams batched/serial: {batched:.2f}x")
    print("forward-pass rows seen by the scheduler:", dict(sorted(handle.scheduler.batch_sizes.items())))
    handle.close()


if __name__ == "__main__":
    main()
