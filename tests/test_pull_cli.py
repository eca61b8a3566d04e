"""`inferd pull` and `inferd serve --hf/--gguf --print-path` as users run them, against the
fake Hub: the non-interactive pick order, the interactive picker in a pseudo-terminal,
progress bars, errors, and `inferd models` showing where a model came from."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from inferd.registry.pull import quants
from tests.fake_hub import FakeHub
from tests.test_pull_hub import REPO, SHARDS, TINY, gguf_repo

ROOT = Path(__file__).parent.parent


@pytest.fixture
def hub():
    h = FakeHub()
    gguf_repo(h)
    yield h
    h.close()


def env(hub: FakeHub) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("INFERD_", "HF_"))}
    return {**e, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_HOME": "/nonexistent-hf-home",
            "INFERD_DOWNLOAD_RESERVE_BYTES": "0", "PYTHONPATH": str(ROOT)}


def inferd(*args: str, hub: FakeHub, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inferd", *args], env=env(hub), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, **kw)


def test_non_interactive_pick_order():
    labels = ["Q2_K", "BF16", "Q8_0", "Q5_K_M", "Q4_0", "Q4_K_S", "Q4_K_M", "IQ2_XXS", "F16"]
    groups = [quants.Group(x, [quants.GFile(f"m-{x}.gguf", 1)]) for x in labels]
    order = []
    while groups:
        g = quants.auto_pick(groups)
        order.append(g.label)
        groups.remove(g)
    assert order == ["Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q8_0", "Q2_K", "IQ2_XXS", "F16", "BF16"]
    assert quants.label_of("unsloth/x/UD-Q4_K_XL/m-00001-of-00002.gguf") == "UD-Q4_K_XL"
    assert quants.label_of("llama-2-7b-chat.Q4_K_M.gguf") == "Q4_K_M"
    assert quants.label_of("Qwen3-0.6B-BF16.gguf") == "BF16"


def test_pull_non_tty_auto_picks_and_prints_path(hub, tmp_path):
    r = inferd("pull", REPO, "--models-dir", str(tmp_path), "--print-path", hub=hub)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path == tmp_path / "generators" / "acme" / "tiny-GGUF" / "Q4_K_M"
    assert "auto-picked Q4_K_M [3 shards] of 4 quantizations" in r.stderr
    assert "tiny-Q4_K_M-00002-of-00003.gguf" in r.stderr and "100%" in r.stderr     # tqdm bars
    assert sorted(p.read_bytes() for p in path.glob("*.gguf")) == sorted(s.read_bytes() for s in SHARDS)
    m = inferd("models", "--models-dir", str(tmp_path), "--no-builtins", hub=hub)
    line = next(x for x in m.stdout.splitlines() if x.startswith("acme/tiny-GGUF:Q4_K_M"))
    assert "generator" in line and "gguf" in line and "(hf.co/acme/tiny-GGUF@0123456789ab)" in line
    # serve --hf with --print-path resolves the same model without fetching it again.
    n = len(hub.log)
    r = inferd("serve", "--hf", f"{REPO}:Q4_K_M", "--models-dir", str(tmp_path), "--print-path", hub=hub)
    assert r.returncode == 0 and Path(r.stdout.strip()) == path
    assert hub.log[n:] == []                                  # a local copy needs no network at all
    r = inferd("serve", "--hf", f"hf.co/{REPO}", "--models-dir", str(tmp_path), "--print-path", hub=hub)
    assert r.returncode == 0 and Path(r.stdout.strip()) == path and hub.log[n:] == []
    r = inferd("serve", "--gguf", str(SHARDS[0]), "--print-path", hub=hub)
    assert r.returncode == 0 and r.stdout.strip() == str(SHARDS[0].resolve())


def test_pull_errors_exit_nonzero_with_the_reason(hub, tmp_path):
    r = inferd("pull", "acme/missing", "--models-dir", str(tmp_path), hub=hub)
    assert r.returncode == 1 and "repository 'acme/missing' not found" in r.stderr
    r = inferd("pull", f"{REPO}:Q3_K_S", "--models-dir", str(tmp_path), hub=hub)
    assert r.returncode == 1 and "no quantization or file 'Q3_K_S'" in r.stderr


def _read_until(fd: int, marker: bytes, timeout: float = 60) -> bytes:
    buf, end = b"", time.time() + timeout
    while marker not in buf:
        if time.time() > end:
            raise AssertionError(f"no {marker!r} in {buf.decode(errors='replace')!r}")
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return buf


def test_tty_picker_through_a_pseudo_terminal(hub, tmp_path):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))   # a 120x40 terminal
    p = subprocess.Popen([sys.executable, "-m", "inferd", "pull", REPO, "--models-dir", str(tmp_path)],
                         stdin=slave, stdout=slave, stderr=slave, env=env(hub), close_fds=True)
    os.close(slave)
    try:
        shown = _read_until(master, b"Select a model [1-4]: ").decode()
        assert f"Available models in {REPO}:" in shown
        lines = [x.strip() for x in shown.splitlines() if ")" in x]
        assert lines[:4] == ["1)  Q4_K_M  [3 shards, 445.8 KB]  <- auto-picked in non-TTY mode",
                             "2)  BF16  [2 shards, 297.8 KB]", "3)  Q8_0  [1 shard, 445.4 KB]",
                             "4)  Q2_K  [1 shard, 445.4 KB]"]
        os.write(master, b"7\n")
        _read_until(master, b"Please type a number from 1 to 4.")
        os.write(master, b"3\n")
        out = _read_until(master, b"pulled ").decode()
        assert "tiny-Q8_0.gguf" in out
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    assert (tmp_path / "generators" / "acme" / "tiny-GGUF" / "Q8_0" / "tiny-Q8_0.gguf").read_bytes() == TINY


def test_two_pull_processes_share_one_transfer(hub, tmp_path):
    hub.faults.delay["Q4_K_M/tiny-Q4_K_M-00001-of-00003.gguf"] = 0.3     # the first one is mid-transfer...
    cmd = [sys.executable, "-m", "inferd", "pull", f"{REPO}:Q4_K_M", "--models-dir", str(tmp_path), "--print-path"]
    a = subprocess.Popen(cmd, env=env(hub), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not hub.gets("00001-of-00003.gguf") and time.time() < deadline:
        time.sleep(0.05)
    b = subprocess.Popen(cmd, env=env(hub), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out_a, out_b = a.communicate(60), b.communicate(60)              # ... when the second one starts
    assert a.returncode == b.returncode == 0, (out_a[1], out_b[1])
    assert out_a[0] == out_b[0] and out_a[0].strip().endswith(b"tiny-GGUF/Q4_K_M")
    for i in (1, 2, 3):
        assert len(hub.gets(f"0000{i}-of-00003.gguf")) == 1            # each file crossed the network once
