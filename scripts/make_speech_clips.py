"""Make the committed speech test clips: known English sentences spoken by espeak-ng,
encoded by ffmpeg as WAV, MP3, FLAC (all three sentences) and OGG/Opus, M4A/AAC, WebM
(the first one). Needs the Debian packages espeak-ng and ffmpeg; no Python packages.

    python scripts/make_speech_clips.py [--out tests/fixtures/speech/clips]

Writes clips.json: {file: sentence}. espeak-ng's output is deterministic for one version,
so regenerating gives the same words (bytes may differ between versions)."""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

SENTENCES = {
    "fox": "The quick brown fox jumps over the lazy dog.",
    "call": "Please call me back when you get home tonight.",
    "walk": "It is a beautiful day to go for a walk in the park.",
}
# ffmpeg output options per extension: mono 16 kHz, low bit rates keep the files small.
FORMATS = {
    "wav": ["-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le"],
    "mp3": ["-ac", "1", "-ar", "16000", "-c:a", "libmp3lame", "-b:a", "32k"],
    "flac": ["-ac", "1", "-ar", "16000", "-c:a", "flac"],
    "ogg": ["-ac", "1", "-ar", "16000", "-c:a", "libopus", "-b:a", "24k"],
    "m4a": ["-ac", "1", "-ar", "16000", "-c:a", "aac", "-b:a", "32k"],
    "webm": ["-ac", "1", "-ar", "16000", "-c:a", "libopus", "-b:a", "24k"],
}
ALL_FORMATS_FOR = "fox"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/speech/clips"))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    index = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key, sentence in SENTENCES.items():
            raw = Path(tmp) / f"{key}.wav"
            # -s 150 words per minute (espeak's default is 175): clearer for a tiny model.
            subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), sentence], check=True)
            exts = FORMATS if key == ALL_FORMATS_FOR else ["wav", "mp3", "flac"]
            for ext in exts:
                dst = out / f"{key}.{ext}"
                subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-i", str(raw), *FORMATS[ext],
                                "-map_metadata", "-1", "-fflags", "+bitexact", str(dst)], check=True)
                index[dst.name] = sentence
    (out / "clips.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(index)} clips to {out}")


if __name__ == "__main__":
    main()
