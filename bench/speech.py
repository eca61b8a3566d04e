"""Speech benchmark on the built-in whisper-tiny.en (CTranslate2). Prints speed as audio
seconds transcribed per wall-clock second (the inverse of the real-time factor), measured in
one run (not a test; numbers depend on the machine and its load):

1. inferd over HTTP (`inferd serve` in a subprocess, POST /v1/audio/transcriptions, json, one
   request at a time) vs faster-whisper's own WhisperModel.transcribe in this process, on the
   same model folder, thread count and decoding options (beam 5, temperature fallback, no
   timestamps: what a `json` response needs), on the committed espeak-ng clips;
2. 4 concurrent clients (each sends every clip) vs one client at a time: aggregate speed.

usage: python bench/speech.py [--threads N] [--rounds R] [--runs K]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import time
from pathlib import Path

import httpx
from common import InferdServer  # noqa: E402  (bench/ is the script folder)

ROOT = Path(__file__).resolve().parent.parent
CLIPS = sorted((ROOT / "tests" / "fixtures" / "speech" / "clips").glob("*.wav")) + \
    sorted((ROOT / "tests" / "fixtures" / "speech" / "clips").glob("*.mp3"))
MODEL = "whisper-tiny.en"


def in_process(threads: int, rounds: int) -> tuple[float, float]:
    """(audio seconds per second, audio seconds) for faster-whisper in this process."""
    from faster_whisper import WhisperModel, decode_audio

    from inferd.registry.builtins import whisper_tiny_en_transcriber

    model = WhisperModel(str(whisper_tiny_en_transcriber().path), device="cpu", cpu_threads=threads)
    data = [p.read_bytes() for p in CLIPS]
    list(model.transcribe(decode_audio(str(CLIPS[0])), beam_size=5, without_timestamps=True)[0])  # warm up
    audio_s, t0 = 0.0, time.perf_counter()
    for _ in range(rounds):
        for raw in data:  # decoding is part of the work on both sides
            import io

            audio = decode_audio(io.BytesIO(raw))
            segments, info = model.transcribe(audio, beam_size=5, without_timestamps=True, language=None)
            list(segments)
            audio_s += info.duration
    return audio_s / (time.perf_counter() - t0), audio_s


class Server(InferdServer):
    def __init__(self, threads: int):
        super().__init__(threads)
        self.transcribe(CLIPS[0].read_bytes())  # load and warm up

    def transcribe(self, raw: bytes, client: httpx.Client | None = None) -> float:
        c = client or httpx
        r = c.post(self.url + "/v1/audio/transcriptions", data={"model": MODEL}, files={"file": ("a", raw)},
                   timeout=300)
        r.raise_for_status()
        return float(r.json()["duration"])


def over_http(srv: Server, rounds: int, clients: int) -> float:
    data = [p.read_bytes() for p in CLIPS]

    def one_client(_: int) -> float:
        with httpx.Client() as c:
            return sum(srv.transcribe(raw, c) for _ in range(rounds) for raw in data)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        audio_s = sum(pool.map(one_client, range(clients)))
    return audio_s / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the clips per measurement")
    ap.add_argument("--runs", type=int, default=3, help="interleaved measurements of each side (best is kept)")
    ns = ap.parse_args()
    print(f"whisper-tiny.en, {ns.threads} threads, {len(CLIPS)} clips x {ns.rounds} rounds")
    srv = Server(ns.threads)
    try:
        results = {}
        for i in range(ns.runs):  # interleaved, so machine load hits both sides alike
            results.setdefault("peer", []).append(in_process(ns.threads, ns.rounds)[0])
            results.setdefault("http", []).append(over_http(srv, ns.rounds, 1))
            print(f"  run {i + 1}: in-process {results['peer'][-1]:.2f}, HTTP {results['http'][-1]:.2f} audio s/s",
                  flush=True)
        results["http4"] = [over_http(srv, ns.rounds, 4)]
    finally:
        srv.close()
    peer, http, http4 = max(results["peer"]), max(results["http"]), max(results["http4"])
    print(f"faster-whisper in-process : {peer:7.2f} audio s/s (RTF {1 / peer:.3f})")
    print(f"inferd HTTP, 1 client     : {http:7.2f} audio s/s (RTF {1 / http:.3f})  {http / peer:.2f}x of in-process")
    print(f"inferd HTTP, 4 clients    : {http4:7.2f} audio s/s aggregate           {http4 / http:.2f}x of one client")


if __name__ == "__main__":
    main()
