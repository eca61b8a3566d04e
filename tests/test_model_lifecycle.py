"""Registry behaviour over real HTTP with a real GGUF: a broken model gives a clear error,
never takes the server down, and is retried; loads happen once; /api/ps shows expiry."""

import asyncio
import datetime as dt
import shutil

import httpx

from tests.server import serve

TINY = "tests/fixtures/gguf/tiny-llama.gguf"


def chat(url, model):
    return httpx.post(url + "/v1/chat/completions", timeout=60, json={
        "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0})


def test_broken_model_is_a_clear_error_and_is_retried(tmp_path):
    folder = tmp_path / "models" / "generators" / "flaky"
    folder.mkdir(parents=True)
    (folder / "model.gguf").write_bytes(b"GGUF but not really" * 10)
    with serve(models_dir=str(tmp_path / "models"), threads=1, models=[f"good={TINY}"]) as s:
        r = chat(s.url, "flaky")
        assert r.status_code == 500
        err = r.json()["error"]
        assert err["code"] == "model_load_failed" and "'flaky' failed to load" in err["message"]
        r = httpx.post(s.url + "/ai/v1/generate", json={"model": "flaky", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1})
        assert r.status_code == 500 and r.json()["error"] == "MODEL_LOAD_FAILED" and r.json()["retryable"] is True
        # The server and its other models are unaffected.
        assert httpx.get(s.url + "/health").status_code == 200
        assert chat(s.url, "good").status_code == 200
        # Fix the file: the next request loads it (failures are not cached).
        shutil.copy(TINY, folder / "model.gguf")
        r = chat(s.url, "flaky")
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None


def test_concurrent_first_requests_load_once_and_ps_shows_expiry():
    with serve(models=[f"tiny={TINY}"], threads=1, keep_alive="10m") as s:
        async def many():
            async with httpx.AsyncClient(base_url=s.url, timeout=60) as c:
                return await asyncio.gather(*[c.post("/api/generate", json={
                    "model": "tiny", "prompt": "hello", "stream": False, "options": {"num_predict": 2}})
                    for _ in range(6)])

        t0 = dt.datetime.now(dt.timezone.utc)
        rs = asyncio.run(many())
        assert [r.status_code for r in rs] == [200] * 6
        entry = s.service.registry.loaded["tiny"]
        assert s.service.registry.loads == 1 and entry.load_seconds > 0  # loader calls, not dict entries
        ps = httpx.get(s.url + "/api/ps").json()["models"]
        assert [m["name"] for m in ps] == ["tiny:latest"]
        expires = dt.datetime.fromisoformat(ps[0]["expires_at"].replace("Z", "+00:00"))
        assert dt.timedelta(minutes=9) < expires - t0 < dt.timedelta(minutes=11)
        # Ollama's keep_alive: 0 unloads after the request.
        r = httpx.post(s.url + "/api/generate", json={"model": "tiny", "keep_alive": 0})
        assert r.status_code == 200 and r.json()["done_reason"] == "unload"
        assert httpx.get(s.url + "/api/ps").json()["models"] == []
