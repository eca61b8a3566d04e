"""Server memory after the largest accepted audio upload (issue 32): `inferd serve` in its own
process with the tiny Whisper fixture, VmRSS from /proc/<pid>/status when idle (after one
small warm-up transcription), at its peak during one upload of --max-audio-bytes of WAV
(speech: a fixture clip repeated), and after it. `--src DIR` runs another source tree (say
`git archive main`) for a before/after comparison.

    python bench/media_rss.py [--mib 25] [--src /tmp/main]"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import InferdServer  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "speech"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def speech_wav(size: int) -> bytes:
    """A 16 kHz mono WAV of about `size` bytes: fox.wav again and again."""
    with wave.open(str(FIXTURES / "clips" / "fox.wav")) as w:
        frames, rate = w.readframes(w.getnframes()), w.getframerate()
    pcm = (frames * (size // len(frames) + 1))[: size - 44]
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm[: len(pcm) // 2 * 2])
    return buf.getvalue()


def transcribe(url: str, data: bytes) -> httpx.Response:
    return httpx.post(url + "/v1/audio/transcriptions", data={"model": "tiny-random", "beam_size": "1",
                                                             "temperature_fallback": "false"},
                      files={"file": ("a.wav", data)}, timeout=1800)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=25, help="upload size (default 25: --max-audio-bytes' default)")
    ap.add_argument("--src", help="another inferd source tree to run")
    args = ap.parse_args()
    size = int(args.mib * (1 << 20))
    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(FIXTURES / "whisper-tiny-random", Path(d) / "transcribers" / "tiny-random")
        srv = InferdServer(2, "--max-audio-bytes", str(size + 1024), models_dir=d, builtins=False, src=args.src)
        try:
            pid = srv.proc.pid
            assert transcribe(srv.url, (FIXTURES / "clips" / "fox.wav").read_bytes()).status_code == 200
            time.sleep(1)
            idle = rss_mib(pid)
            data = speech_wav(size)
            peak, stop = [idle], threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    peak.append(rss_mib(pid))
                    time.sleep(0.05)

            t = threading.Thread(target=sample, daemon=True)
            t.start()
            t0 = time.monotonic()
            r = transcribe(srv.url, data)
            took = time.monotonic() - t0
            stop.set()
            t.join()
            time.sleep(1)
            after = rss_mib(pid)
            print(f"upload {len(data) / (1 << 20):.1f} MiB ({len(data) / 32000:.0f} s of audio): HTTP {r.status_code} "
                  f"in {took:.1f} s")
            print(f"VmRSS idle {idle:.0f} MiB, peak {max(peak):.0f} MiB, after {after:.0f} MiB "
                  f"(+{after - idle:.0f} MiB over idle)")
        finally:
            srv.close()


if __name__ == "__main__":
    main()
