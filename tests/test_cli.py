"""The `inferd` console script as a user runs it: a real process on a real port."""

import os
import subprocess
import sys
import time

import httpx

from tests.server import free_port

INFERD = [sys.executable, "-m", "inferd"]


def run(*args, env=None, **kw):
    return subprocess.run([*INFERD, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, **kw)


def test_models_lists_without_starting(tmp_path):
    (tmp_path / "m" / "generators" / "tiny").mkdir(parents=True)
    (tmp_path / "m" / "generators" / "tiny" / "w.gguf").write_bytes(b"0" * 2048)
    r = run("models", "--models-dir", str(tmp_path / "m"), "--ml-dir", str(tmp_path / "ml"), "--no-builtins")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:5] == ["NAME", "KIND", "FORMAT", "SIZE", "SOURCE"]
    rows = {ln.split()[0]: ln.split() for ln in lines[1:]}
    assert rows["tiny"][1:4] == ["generator", "gguf", "2.0"] and rows["fixed"][1] == "chunker"


def test_public_bind_is_refused():
    r = run("serve", "--host", "0.0.0.0", "--port", str(free_port()))
    assert r.returncode == 2 and "allow-insecure-public-bind" in r.stderr


def test_serve_with_env_and_api_key(tmp_path):
    port = free_port()
    env = {"INFERD_PORT": str(port), "INFERD_API_KEY": "k1", "INFERD_MODELS_DIR": str(tmp_path),
           "INFERD_ML_DIR": str(tmp_path), "INFERD_BUILTINS": "false"}
    p = subprocess.Popen([*INFERD, "serve"], env={**os.environ, **env}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        assert httpx.get(url + "/v1/models").status_code == 401
        ok = httpx.get(url + "/ai/v1/models", headers={"Authorization": "Bearer k1"})
        assert ok.status_code == 200 and list(ok.json()["chunkers"]) == ["fixed"]
    finally:
        p.terminate()
        out = p.communicate(timeout=20)[0]
    assert "serving 1 models" in out
