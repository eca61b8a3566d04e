"""Reader benchmark on the built-in `pp-ocr` (PP-OCRv6 small from the rapidocr wheel). Prints
ratios measured in one run (not a test; numbers depend on the machine and its load):

1. one client, one image per request: inferd over HTTP (`POST /ai/v1/read`, PNG data URI) vs
   the rapidocr package called in-process on the same PNG bytes with the same thread count;
2. 4 concurrent clients, one image per request: inferd (their images share recognition
   batches) vs 4 threads calling one in-process engine one image at a time (the package's
   sessions are not meant to be shared, so the peer serialises on a lock, as a naive server
   around it would).

Images are rendered invoice pages of 4-6 lines (Pillow's bundled font, ~450x330 pixels).

usage: python bench/readers.py [--threads N] [--images N] [--repeat R]
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures as cf
import io
import os
import random
import statistics
import threading
import time

import httpx
from common import InferdServer  # noqa: E402  (bench/ is the script folder)

LINES = ["Invoice {n}", "ACME Corp. {a} Main Street", "Qty {q} x ${p}", "Total due: ${t}", "Date: 2025-{m:02d}-{d:02d}",
         "Thank you for your order"]


def pages(n: int, seed: int = 0) -> list[bytes]:
    from PIL import Image, ImageDraw, ImageFont

    rng = random.Random(seed)
    font = ImageFont.load_default(size=30)
    out = []
    for _ in range(n):
        k = rng.randint(4, 6)
        lines = [line.format(n=f"2024-{rng.randint(100, 999)}", a=rng.randint(1, 99), q=rng.randint(1, 9),
                          p=f"{rng.randint(1, 99)}.{rng.randint(0, 99):02d}", t=f"{rng.randint(100, 9999):,}.00",
                          m=rng.randint(1, 12), d=rng.randint(1, 28)) for line in LINES[:k]]
        img = Image.new("RGB", (460, 40 + 48 * k), "white")
        d = ImageDraw.Draw(img)
        for i, line in enumerate(lines):
            d.text((20, 20 + 48 * i), line, font=font, fill="black")
        buf = io.BytesIO()
        img.save(buf, "PNG")
        out.append(buf.getvalue())
    return out


def engine(threads: int):
    from rapidocr import RapidOCR

    from inferd.runtimes.ocr.ppocr import package_models

    m = package_models()
    return RapidOCR(params={"Global.log_level": "warning", "Det.model_path": str(m["det"]),
                            "Rec.model_path": str(m["rec"]), "Cls.model_path": str(m["cls"]),
                            "EngineConfig.onnxruntime.intra_op_num_threads": threads,
                            "EngineConfig.onnxruntime.inter_op_num_threads": 1})


def in_process(eng, imgs: list[bytes]) -> float:
    t0 = time.perf_counter()
    for b in imgs:
        eng(b)
    return len(imgs) / (time.perf_counter() - t0)


def in_process_clients(eng, imgs: list[bytes], n: int) -> float:
    lock = threading.Lock()

    def one(b):
        with lock:
            eng(b)

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(n) as pool:
        list(pool.map(one, imgs))
    return len(imgs) / (time.perf_counter() - t0)


def _uri(b: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(b).decode()


def http_one(url: str, imgs: list[bytes]) -> tuple[float, list[str]]:
    texts = []
    with httpx.Client(base_url=url, timeout=300) as c:
        t0 = time.perf_counter()
        for b in imgs:
            r = c.post("/ai/v1/read", json={"model": "pp-ocr", "images": [{"url": _uri(b)}]})
            r.raise_for_status()
            texts.append(r.json()["data"][0]["text"])
        return len(imgs) / (time.perf_counter() - t0), texts


def http_clients(url: str, imgs: list[bytes], n: int) -> float:
    local = threading.local()

    def one(b):
        if not hasattr(local, "c"):
            local.c = httpx.Client(base_url=url, timeout=300)
        local.c.post("/ai/v1/read", json={"model": "pp-ocr", "images": [{"url": _uri(b)}]}).raise_for_status()

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(n) as pool:
        list(pool.map(one, imgs))
    return len(imgs) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--images", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    imgs = pages(a.images)
    eng = engine(a.threads)
    eng(imgs[0])  # warm up
    srv = InferdServer(a.threads)
    try:
        http_one(srv.url, imgs[:1])  # load + warm up
        rows: dict[str, list[float]] = {"peer": [], "http": [], "peer4": [], "http4": []}
        for _ in range(a.repeat):  # interleaved, so load changes hit both alike
            rows["peer"].append(in_process(eng, imgs))
            ips, texts = http_one(srv.url, imgs)
            rows["http"].append(ips)
            rows["peer4"].append(in_process_clients(eng, imgs, 4))
            rows["http4"].append(http_clients(srv.url, imgs, 4))
        same = sum(t == "\n".join(eng(b).txts) for t, b in zip(texts, imgs))
    finally:
        srv.close()
    best = {k: max(v) for k, v in rows.items()}
    print(f"{a.images} images, {a.threads} threads, best of {a.repeat}; load average {os.getloadavg()[0]:.1f}")
    print(f"  rapidocr in-process, 1 client      {best['peer']:6.2f} images/s")
    print(f"  inferd HTTP /ai/v1/read, 1 client  {best['http']:6.2f} images/s  ({best['http'] / best['peer']:.2f}x)")
    print(f"  rapidocr in-process, 4 clients     {best['peer4']:6.2f} images/s")
    print(f"  inferd HTTP, 4 clients             {best['http4']:6.2f} images/s  ({best['http4'] / best['peer4']:.2f}x)")
    print(f"  same text as the package: {same}/{len(imgs)} images; median of runs: "
          + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in rows.items()))


if __name__ == "__main__":
    main()
