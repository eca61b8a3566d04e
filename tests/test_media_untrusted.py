"""Untrusted media over real HTTP (issue 32): an "audio" upload never makes the server read
its own files (ffconcat), bind ports (SDP) or hold a thread; playlists and session formats
are one 400 that says nothing about the server's disk; valid multichannel WAVs decode
(down-mixed); audio routes take file ids; /v1/files refuses what no route decodes (TIFF);
size flags take units; a file of exactly --max-file-bytes fits through --max-body-bytes."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import shutil
import socket
import time
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from inferd.cli import build_parser
from inferd.config import load_settings
from tests.conftest import FIXTURES
from tests.server import serve

ROOT = Path(__file__).resolve().parent.parent
SPEECH = FIXTURES / "speech"
CLIPS = SPEECH / "clips"
WREF = json.loads((SPEECH / "whisper-tiny-random" / "reference.json").read_text())["clips"]
GREEDY = {"beam_size": "1", "temperature_fallback": "false"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    shutil.copytree(SPEECH / "whisper-tiny-random", d / "transcribers" / "tiny-random")
    data = tmp_path_factory.mktemp("data")
    mp = pytest.MonkeyPatch()
    mp.chdir(ROOT)   # the server's working directory holds tests/fixtures/...: what a playlist would name
    with serve(models_dir=str(d), data_dir=str(data), threads=1, max_audio_bytes=30_000_000,
               max_audio_seconds=20) as s:
        yield s
    mp.undo()


def transcribe(srv, data: bytes, name: str = "a.wav", **fields) -> httpx.Response:
    return httpx.post(srv.url + "/v1/audio/transcriptions", data={"model": "tiny-random", **GREEDY, **fields},
                      files={"file": (name, data)}, timeout=60)


def antfly(srv, audio: str) -> httpx.Response:
    return httpx.post(srv.url + "/ai/v1/transcribe", json={"model": "tiny-random", "audio": audio}, timeout=60)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---- 1. a playlist naming the server's own files ------------------------------------------------
def test_ffconcat_playlist_reads_nothing_and_reveals_nothing(srv):
    assert (ROOT / "tests/fixtures/speech/clips/call.wav").is_file()
    present = b"ffconcat version 1.0\nfile tests/fixtures/speech/clips/call.wav\n"
    absent = b"ffconcat version 1.0\nfile tests/fixtures/speech/clips/no-such-file.wav\n"
    answers = []
    for body in (present, absent):
        r = transcribe(srv, body, "p.txt")
        assert r.status_code == 400, r.text          # was 200 with call.wav's transcript
        assert r.json()["error"]["param"] == "file"
        answers.append(r.json()["error"]["message"])
        a = antfly(srv, b64(body))
        assert a.status_code == 400, a.text
        answers.append(a.json()["message"] if "message" in a.json() else a.json()["error"]["message"])
    # One message whether or not the named file exists; no path, no errno text.
    assert answers[0] == answers[2] and answers[1] == answers[3]
    assert "not an accepted audio format" in answers[0]
    for m in answers:
        assert "call.wav" not in m and "No such file" not in m and "no audio stream" not in m


@pytest.mark.parametrize("body", [
    b"#EXTM3U\n#EXT-X-VERSION:3\n#EXTINF:3.0,\ntests/fixtures/speech/clips/call.wav\n#EXT-X-ENDLIST\n",
    b'<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011"><Period><AdaptationSet>'
    b'<Representation><BaseURL>tests/fixtures/speech/clips/call.wav</BaseURL></Representation>'
    b"</AdaptationSet></Period></MPD>",
    b"rtsp://127.0.0.1:554/stream\n",
    b"file:tests/fixtures/speech/clips/call.wav",
    b"subfile,,start,0,end,0,,:tests/fixtures/speech/clips/call.wav",
    b"tests/fixtures/speech/clips/call%d.wav",
], ids=["hls", "dash", "rtsp", "file-url", "subfile", "image2-pattern"])
def test_playlists_and_urls_are_one_400(srv, body):
    r = transcribe(srv, body, "x.m3u8")
    assert r.status_code == 400 and "not an accepted audio format" in r.json()["error"]["message"]


# ---- 2. a session description that would bind UDP ports ----------------------------------------
def _free_udp_pair() -> int:
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("0.0.0.0", 0))
            port = s.getsockname()[1]
        if port % 2 == 0 and port < 65534:
            return port
    raise RuntimeError("no free even UDP port")


def _udp_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_sdp_binds_no_port_and_holds_no_thread(srv):
    port = _free_udp_pair()
    sdp = (f"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
           f"m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n").encode()
    t0 = time.monotonic()
    r = transcribe(srv, sdp, "s.sdp")
    assert r.status_code == 400 and "not an accepted audio format" in r.json()["error"]["message"]
    assert time.monotonic() - t0 < 5                      # was 20 s, with the RTP/RTCP ports bound
    assert _udp_free(port) and _udp_free(port + 1)
    # Eight at once (what filled the shared pool before) are all refused at once, and the
    # server answers other requests meanwhile.
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        futs = [pool.submit(transcribe, srv, sdp, "s.sdp") for _ in range(8)]
        listing = pool.submit(httpx.get, srv.url + "/v1/files", timeout=30)
        assert [f.result().status_code for f in futs] == [400] * 8
        assert listing.result().status_code == 200
    assert time.monotonic() - t0 < 10
    assert _udp_free(port) and _udp_free(port + 1)


# ---- 6. valid media that failed, file ids, TIFF, size flags ---------------------------------------
def _multichannel(src: Path, channels: int) -> bytes:
    """`src` (mono 16-bit WAV) with its samples copied into every one of `channels` channels."""
    with wave.open(str(src)) as w:
        rate, frames = w.getframerate(), w.readframes(w.getnframes())
        assert w.getnchannels() == 1 and w.getsampwidth() == 2
    x = np.frombuffer(frames, dtype="<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(x[:, None], channels, axis=1).tobytes())
    return buf.getvalue()


@pytest.mark.parametrize("channels", [32, 255])
def test_many_channel_wav_is_downmixed_and_transcribed(srv, channels):
    data = _multichannel(CLIPS / "fox.wav", channels)
    r = transcribe(srv, data, response_format="verbose_json")
    assert r.status_code == 200, r.text                    # was 400 "Invalid argument returned 22"
    mono = transcribe(srv, (CLIPS / "fox.wav").read_bytes(), response_format="verbose_json").json()
    # Every channel holds the mono clip: the mean is that clip, sample for sample.
    assert (r.json()["text"], r.json()["duration"]) == (mono["text"], mono["duration"])
    assert transcribe(srv, data).json()["text"] == WREF["fox.wav"]["transcribe"]["text"].strip()


def test_audio_routes_take_file_ids(srv):
    up = httpx.post(srv.url + "/v1/files", data={"purpose": "user_data"},
                    files={"file": ("fox.wav", (CLIPS / "fox.wav").read_bytes())}, timeout=30)
    assert up.status_code == 200 and up.json()["content_type"] == "audio/wav"
    fid = up.json()["id"]
    want = WREF["fox.wav"]["transcribe"]["text"].strip()
    # A multipart form whose `file` (or `file_id`) is a text field holding the id.
    r = httpx.post(srv.url + "/v1/audio/transcriptions", data={"model": "tiny-random", **GREEDY},
                   files={"file": (None, fid)}, timeout=60)
    assert r.status_code == 200 and r.json()["text"] == want, r.text
    r = httpx.post(srv.url + "/v1/audio/translations", data={"model": "tiny-random", **GREEDY},
                   files={"file_id": (None, fid)}, timeout=60)
    assert r.status_code == 200 and r.json()["text"], r.text
    r = antfly(srv, fid)
    assert r.status_code == 200 and r.json()["data"][0]["text"], r.text
    r = httpx.post(srv.url + "/v1/audio/transcriptions", data={"model": "tiny-random"},
                   files={"file": (None, "file-" + "0" * 24)}, timeout=30)
    assert r.status_code == 404
    png = io.BytesIO()
    Image.new("RGB", (4, 4)).save(png, "PNG")
    img = httpx.post(srv.url + "/v1/files", data={"purpose": "vision"}, files={"file": ("a.png", png.getvalue())})
    r = antfly(srv, img.json()["id"])
    assert r.status_code == 400 and "not audio" in r.json()["message"]


def test_tiff_is_refused_at_upload_like_everywhere_else(srv):
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, "TIFF")
    r = httpx.post(srv.url + "/v1/files", data={"purpose": "vision"}, files={"file": ("a.tif", buf.getvalue())})
    assert r.status_code == 400 and "unsupported file type" in r.json()["error"]["message"]
    assert "TIFF" not in r.json()["error"]["message"]


def test_size_flags_take_units_everywhere():
    ns = build_parser().parse_args(["serve", "--max-file-bytes", "1MiB", "--max-body-bytes", "2MiB",
                                    "--max-audio-bytes", "10MiB", "--max-media-bytes", "64MiB",
                                    "--max-files-total-bytes", "2GiB", "--download-reserve-bytes", "512MiB"])
    s = load_settings({k: v for k, v in vars(ns).items() if k in
                       ("max_file_bytes", "max_body_bytes", "max_audio_bytes", "max_media_bytes",
                        "max_files_total_bytes", "download_reserve_bytes")})
    assert (s.max_file_bytes, s.max_body_bytes, s.max_audio_bytes) == (1 << 20, 2 << 20, 10 << 20)
    assert (s.max_media_bytes, s.max_files_total_bytes, s.download_reserve_bytes) == (64 << 20, 2 << 30, 512 << 20)
    assert load_settings({"max_file_bytes": 4096}).max_file_bytes == 4096


def test_a_file_of_exactly_max_file_bytes_fits_through_the_body_limit(tmp_path):
    limit = 1 << 20
    wav = (CLIPS / "fox.wav").read_bytes()
    exact = wav + b"\0" * (limit - len(wav))
    with serve(data_dir=str(tmp_path), max_file_bytes="1MiB", max_body_bytes="1MiB") as s:
        r = httpx.post(s.url + "/v1/files", data={"purpose": "user_data"}, files={"file": ("a.wav", exact)})
        assert r.status_code == 200 and r.json()["bytes"] == limit, r.text
        r = httpx.post(s.url + "/v1/files", data={"purpose": "user_data"}, files={"file": ("a.wav", exact + b"\0")})
        assert r.status_code == 413 and "--max-file-bytes" in r.json()["error"]["message"]
        # Other routes keep --max-body-bytes.
        r = httpx.post(s.url + "/v1/embeddings", content=b"{" + b" " * limit + b"}",
                       headers={"content-type": "application/json"})
        assert r.status_code == 413
