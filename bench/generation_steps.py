"""Where the generation worker's time goes per step (no HTTP, no event loop): the 16-stream
workload of bench/generation.py (distinct 128-token prompts, 128 greedy tokens each, 16 slots
of 512, 2 threads) submitted straight to the GenerationEngine of the built-in gemma-3-270m,
with the backend's decode and sample timed: per step, the decode, the native sampling of
every sequence, and the rest (the engine's Python). Two rounds.

usage: python bench/generation_steps.py"""
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import generation as G  # noqa: E402
from inferd.models import ModelKind  # noqa: E402
from inferd.registry.builtins import gemma_270m_path  # noqa: E402
from inferd.registry.discovery import make_spec  # noqa: E402
from inferd.runtimes.options import RuntimeOptions  # noqa: E402
from inferd.scheduling.generation import Job  # noqa: E402
from inferd.service.loading import LOADERS  # noqa: E402
from inferd.types import SamplingParams  # noqa: E402

N, NEW = 16, 128


def main() -> None:
    spec = make_spec("gemma", gemma_270m_path(), "cli", ModelKind.GENERATOR)
    g = LOADERS[(ModelKind.GENERATOR, "gguf")](spec, RuntimeOptions(threads=2, parallel=16, n_ctx=512, cache_ram=0))
    rt, eng = g.runtime, g.scheduler
    acc = {"decode": 0.0, "sample": 0.0}

    def timed(name, fn):
        def wrapper(*a):
            t = time.perf_counter()
            try:
                return fn(*a)
            finally:
                acc[name] += time.perf_counter() - t
        return wrapper
    rt.decode, rt.sample = timed("decode", rt.decode), timed("sample", rt.sample)
    banned = {int(k): v for k, v in G.EOG.items()}  # every stream makes all NEW tokens
    for rnd in range(2):
        left, done = [N], threading.Event()

        def sink(d, left=left, done=done):
            if d.finish_reason or d.error:
                left[0] -= 1
                if left[0] == 0:
                    done.set()
        acc.update(decode=0.0, sample=0.0)
        s0, t0 = eng.steps, time.perf_counter()
        for text in G.prompts(rt.model, N, f"steps {rnd}. "):
            sampler = rt.make_sampler(SamplingParams(temperature=0.0, logit_bias=banned))
            eng.submit(Job(prompt=rt.tokenize(text), sampler=sampler, max_tokens=NEW, sink=sink))
        done.wait(600)
        wall, steps = time.perf_counter() - t0, eng.steps - s0
        print(f"{N} streams: {N * NEW / wall:.1f} tok/s, {steps} steps, per step: wall {wall / steps * 1e3:.1f} ms, "
              f"decode {acc['decode'] / steps * 1e3:.1f}, sample {acc['sample'] / steps * 1e3:.2f}, rest "
              f"{(wall - acc['decode'] - acc['sample']) / steps * 1e3:.2f} ms", flush=True)
    g.close()


if __name__ == "__main__":
    main()
