"""What the LoRA tests share: a server with the tiny generator and its two adapters (a file
and a folder holding the same weights) beside a second generator without any, greedy token
ids over Ollama's route, the switch routes, and a slow-decode patch to hold a request open."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from tests.chat_fixtures import generator_dir
from tests.server import Running, serve

PROMPT = "hello world"


@contextlib.contextmanager
def lora_server(models: Path) -> Iterator[Running]:
    generator_dir(models, "tiny", n_ctx=256, loras={"style": "file", "folded": "folder"})
    generator_dir(models, "other", n_ctx=256)
    with serve(models_dir=str(models), parallel=4, threads=1) as s:
        yield s


def greedy(srv: Running, model: str = "tiny", n: int = 24, **extra) -> list[int]:
    """Generated token ids (Ollama's `context` holds prompt + output)."""
    r = httpx.post(srv.url + "/api/generate", json={"model": model, "prompt": PROMPT, "raw": True, "stream": False,
                                                     "options": {"temperature": 0, "num_predict": n}, **extra},
                   timeout=60)
    assert r.status_code == 200, r.text
    j = r.json()
    return j["context"][j["prompt_eval_count"]:]


def set_lora(srv: Running, **body) -> httpx.Response:
    return httpx.post(srv.url + "/set_lora", json=body, timeout=60)


def unset_lora(srv: Running, **body) -> httpx.Response:
    return httpx.post(srv.url + "/unset_lora", json=body, timeout=60)


def slow_decode(handle, seconds: float) -> Callable[[], object]:
    """Make every decode step of `handle`'s runtime take `seconds` longer; returns the undo."""
    rt = handle.runtime
    real = rt.decode

    def decode(entries):
        time.sleep(seconds)
        return real(entries)

    rt.decode = decode
    return lambda: rt.__dict__.pop("decode", None)


def wait_until(cond: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)
