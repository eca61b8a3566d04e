"""Rewrite benchmark: generated tokens/s of POST /ai/v1/rewrite at 1 and 8 concurrent
clients (one input per request, greedy), against running the same files in this process:

- ONNX (tests/fixtures/seq2seq/tiny-t5-optimum and tiny-bart-merged): a straightforward
  onnxruntime loop, one input at a time: encoder, first decoder step, then the with-past
  decoder with argmax until EOS or max_tokens;
- CTranslate2 (tiny-t5-ct2): Translator.translate_batch, one input per call.

Both sides decode the same inputs to the same tokens (checked) with the same thread count.
Ratios are measured in one run; numbers depend on the machine and its load. Not a test.

A t5-small-sized random model (`python scripts/make_tiny_seq2seq.py --bench DIR` in the
fixture venv) shows the per-step cost of a real model: `--onnx DIR/t5-small-random-optimum
--ct2 DIR/t5-small-random-ct2`.

usage: python bench/rewrite.py [--threads N] [--seconds S] [--max-tokens N] [--repeat R]
                               [--onnx FOLDER] [--ct2 FOLDER]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from common import InferdServer  # noqa: E402  (bench/ is the script folder)

ROOT = Path(__file__).resolve().parent.parent
S2S = ROOT / "tests" / "fixtures" / "seq2seq"
MODELS = {"t5-onnx": "tiny-t5-optimum", "bart-onnx-merged": "tiny-bart-merged", "t5-ct2": "tiny-t5-ct2"}
WORDS = ("generate question: <hl> the capital <hl> is Lisbon paraphrase: rain falls from clouds when water "
         "vapour condenses summarize: bake the bread for forty minutes a local inference server answers").split()


def inputs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))) for _ in range(n)]


# ---- in-process peers --------------------------------------------------------------------------
class OnnxLoop:
    """The plain way to run an export: sessions, a Python loop, argmax."""

    def __init__(self, folder: Path, threads: int):
        import json

        import onnxruntime as ort
        from tokenizers import Tokenizer

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.log_severity_level = 3
        load = lambda name: ort.InferenceSession(str(folder / name), so, providers=["CPUExecutionProvider"])  # noqa: E731
        self.enc = load("encoder_model.onnx")
        self.merged = (folder / "decoder_model_merged.onnx").is_file()
        if self.merged:
            self.init = self.past = load("decoder_model_merged.onnx")
        else:
            self.init, self.past = load("decoder_model.onnx"), load("decoder_with_past_model.onnx")
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        gen = json.loads((folder / "generation_config.json").read_text())
        self.start, self.eos = gen["decoder_start_token_id"], gen["eos_token_id"]
        self.forced_bos = gen.get("forced_bos_token_id")
        self.no_repeat = int(gen.get("no_repeat_ngram_size") or 0)
        self.pasts = [i for i in self.past.get_inputs() if i.name.startswith("past_key_values")]

    def run(self, text: str, max_tokens: int) -> list[int]:
        ids = np.array([self.tok.encode(text).ids], np.int64)
        mask = np.ones_like(ids)
        hs = self.enc.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        feed = {"input_ids": np.array([[self.start]]), "encoder_attention_mask": mask, "encoder_hidden_states": hs}
        if self.merged:
            feed["use_cache_branch"] = np.array([False])
            for p in self.pasts:
                dims = [1] + [d if isinstance(d, int) else 1 for d in p.shape[1:]]
                dims[2] = 0  # an empty past: the first-step branch does not read it
                feed[p.name] = np.zeros(dims, np.float32)
        outs = self.init.run(None, feed)
        kv = dict(zip([o.name for o in self.init.get_outputs()][1:], outs[1:]))
        logits, got = outs[0][0, -1], []
        for step in range(max_tokens):
            seq, n = [self.start, *got], self.no_repeat
            if n and len(seq) >= n:  # transformers' no_repeat_ngram_size
                logits = logits.copy()
                for j in range(len(seq) - n + 1):
                    if seq[j:j + n - 1] == seq[len(seq) + 1 - n:]:
                        logits[seq[j + n - 1]] = -np.inf
            nxt = self.forced_bos if step == 0 and self.forced_bos is not None else int(np.argmax(logits))
            if step == max_tokens - 1 and self.forced_bos is not None:
                nxt = self.eos  # BART's forced EOS at max_length
            got.append(nxt)
            if nxt == self.eos or step == max_tokens - 1:
                break
            feed = {"input_ids": np.array([[nxt]]), "encoder_attention_mask": mask}
            if self.merged:
                feed.update(use_cache_branch=np.array([True]), encoder_hidden_states=hs)
            for p in self.pasts:
                feed[p.name] = kv[p.name.replace("past_key_values", "present")]
            res = self.past.run(None, feed)
            logits = res[0][0, -1]
            kv.update(zip([o.name for o in self.past.get_outputs()][1:], res[1:]))
        return got


class Ct2Loop:
    def __init__(self, folder: Path, threads: int):
        import ctranslate2
        from tokenizers import Tokenizer

        self.tr = ctranslate2.Translator(str(folder), device="cpu", inter_threads=1, intra_threads=threads)
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def run(self, text: str, max_tokens: int) -> list[int]:
        src = self.tok.encode(text).tokens
        r = self.tr.translate_batch([src], beam_size=1, max_decoding_length=max_tokens, min_decoding_length=0,
                                    return_end_token=True)
        return [self.tok.token_to_id(t) for t in r[0].hypotheses[0]]


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system, all threads) of a process: the cost of the work whatever else
    the machine is doing (wall-clock ratios on a shared machine move with everyone's load)."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peer_rate(peer, texts: list[str], max_tokens: int, seconds: float) -> tuple[float, float]:
    """(tokens per wall second, tokens per CPU second)."""
    done, t0, c0, i = 0, time.perf_counter(), cpu_seconds(), 0
    while time.perf_counter() - t0 < seconds:
        done += len(peer.run(texts[i % len(texts)], max_tokens))
        i += 1
    return done / (time.perf_counter() - t0), done / max(1e-9, cpu_seconds() - c0)


def server_rates(pid: int, measure) -> tuple[float, float]:
    """(tokens per wall second, tokens per CPU second of the server process) of `measure()`."""
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    tokens = measure()
    return tokens / (time.perf_counter() - t0), tokens / max(1e-9, cpu_seconds(pid) - c0)


def http_batch_rate(url: str, model: str, texts: list[str], max_tokens: int, seconds: float) -> float:
    """Every input in one request (one encoder pass, decoded together)."""
    tokens = 0
    with httpx.Client(base_url=url, timeout=120) as c:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            r = c.post("/ai/v1/rewrite", json={"model": model, "inputs": texts, "max_tokens": max_tokens,
                                               "num_beams": 1, "temperature": 0})
            r.raise_for_status()
            tokens += r.json()["usage"]["completion_tokens"]
        return tokens


# ---- inferd over HTTP --------------------------------------------------------------------------
def http_rate_one(url: str, model: str, texts: list[str], max_tokens: int, seconds: float) -> float:
    """One client, one request at a time (a plain synchronous client: the async one costs more)."""
    tokens, i = 0, 0
    with httpx.Client(base_url=url, timeout=120) as c:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            r = c.post("/ai/v1/rewrite", json={"model": model, "inputs": [texts[i % len(texts)]],
                                               "max_tokens": max_tokens, "num_beams": 1, "temperature": 0})
            r.raise_for_status()
            tokens += r.json()["usage"]["completion_tokens"]
            i += 1
        return tokens


async def http_rate(url: str, model: str, texts: list[str], max_tokens: int, clients: int,
                    seconds: float) -> float:
    tokens = 0
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        async def client(k: int) -> None:
            nonlocal tokens
            i = k
            while time.perf_counter() < stop:
                r = await c.post("/ai/v1/rewrite", json={"model": model, "inputs": [texts[i % len(texts)]],
                                                         "max_tokens": max_tokens, "num_beams": 1, "temperature": 0})
                r.raise_for_status()
                tokens += r.json()["usage"]["completion_tokens"]
                i += clients
        await asyncio.gather(*(client(k) for k in range(clients)))
        return tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--max-tokens", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the best of each is kept")
    ap.add_argument("--onnx", type=Path, help="an optimum-layout folder instead of the fixtures")
    ap.add_argument("--ct2", type=Path, help="a CTranslate2 folder instead of the fixture")
    a = ap.parse_args()
    models = {name: S2S / folder for name, folder in MODELS.items()}
    if a.onnx or a.ct2:
        models = {k: v for k, v in (("onnx", a.onnx), ("ct2", a.ct2)) if v}
    texts = inputs(32)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "rewriters").mkdir()
        for name, folder in models.items():
            os.symlink(folder.resolve(), Path(d) / "rewriters" / name)
        srv = InferdServer(a.threads, models_dir=d, builtins=False)
        try:
            rows = []
            for name, folder in models.items():
                peer = (Ct2Loop if name.endswith("ct2") else OnnxLoop)(folder, a.threads)
                r = httpx.post(srv.url + "/ai/v1/rewrite", json={"model": name, "inputs": texts, "temperature": 0,
                                                                 "num_beams": 1, "max_tokens": a.max_tokens},
                               timeout=120).json()
                first = [peer.run(t, a.max_tokens) for t in texts]
                same = [peer.tok.decode(f, skip_special_tokens=True) for f in first] == \
                    [d["texts"][0] for d in r["data"]] and sum(map(len, first)) == r["usage"]["completion_tokens"]
                best = [(0.0, 0.0)] * 4
                pid = srv.proc.pid
                for _ in range(a.repeat):  # interleaved, so that load changes hit every column alike
                    got = [peer_rate(peer, texts, a.max_tokens, a.seconds),
                           server_rates(pid, lambda name=name: http_rate_one(srv.url, name, texts, a.max_tokens, a.seconds)),
                           server_rates(pid, lambda name=name: asyncio.run(
                               http_rate(srv.url, name, texts, a.max_tokens, 8, a.seconds))),
                           server_rates(pid, lambda name=name: http_batch_rate(srv.url, name, texts, a.max_tokens, a.seconds))]
                    best = [(max(b[0], g[0]), max(b[1], g[1])) for b, g in zip(best, got)]
                rows.append((name, best, same))
        finally:
            srv.close()
    print(f"threads {a.threads}, best of {a.repeat} x {a.seconds:.0f} s, greedy, max_tokens {a.max_tokens}, "
          f"{len(texts)} inputs; generated tokens per wall second / per CPU second of the process doing the work "
          f"(the bench process for the loop, the server for HTTP); ratios to the in-process loop")
    print(f"{'model':<18}{'in-process loop':>22}{'HTTP, 1 client':>30}{'HTTP, 8 clients':>30}"
          f"{'HTTP, 32 per request':>30}  same tokens")
    for name, best, same in rows:
        (bw, bc), cols = best[0], best[1:]
        line = f"{name:<18}{bw:>10.0f} / {bc:<9.0f}"
        for w, c in cols:
            line += f"{w:>8.0f} ({w / bw:.2f}x) / {c:.0f} ({c / bc:.2f}x)"
        print(line + f"  {'yes' if same else 'NO'}")

if __name__ == "__main__":
    main()
