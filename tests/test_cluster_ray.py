"""Scale-out on Ray Serve, for real: a two-node Ray cluster inside a network namespace that has
only `lo` (nothing can leave it; Ray must never run on the bare host, where it binds every
interface), inferd deployed on it with `inferd cluster deploy`: the tiny GGUF with 2 replicas
(one per node) and the tiny embedder with 1. The clients run in threads that joined the
namespace. The namespace, Ray and every process in it are removed whatever happens.

Slow (a Ray head takes 10-20 s to start); marked, and run in CI."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests.ray_ns import BIN, PORT, URL, cleanup, in_ns, ns_pids, sh, start_cluster

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert os.geteuid() == 0 and shutil.which("ip"), "the Ray cluster test needs root and iproute2"
    tmp = tmp_path_factory.mktemp("ray")
    chat = tmp / "tiny"  # a long context so streams last long enough to watch (seconds, not ms)
    chat.mkdir()
    shutil.copy(FIX / "gguf" / "tiny-llama.gguf", chat / "model.gguf")
    (chat / "model_manifest.json").write_text(json.dumps({"n_ctx": 32768}))
    cfg = tmp / "cluster.toml"
    cfg.write_text(f"""
[[models]]
name = "tiny"
kind = "generator"
path = "{chat}"
num_replicas = 2
max_replicas_per_node = 1
num_cpus = 0.5
parallel = 2
threads = 1
max_queued_requests = 1

[[models]]
name = "tiny-embed"
kind = "embedder"
path = "{FIX / 'onnx' / 'tiny-bert-embed'}"
num_cpus = 0.25
threads = 1
""")
    try:
        start_cluster(tmp / "t")
        t0 = time.time()
        r = sh(str(BIN / "inferd"), "cluster", "deploy", "--ray", "127.0.0.1:6379", "--cluster-config", str(cfg),
               "--port", str(PORT), timeout=300)
        assert r.stdout.strip().endswith(URL), r.stdout
        print(f"deployed in {time.time() - t0:.1f}s", file=sys.stderr)
        yield cfg
    finally:
        cleanup()


def client() -> openai.OpenAI:
    return openai.OpenAI(base_url=URL + "/v1", api_key="none", max_retries=0, timeout=60)


def load() -> dict:
    return httpx.get(URL + "/load", timeout=10).json()


def wait_until(cond, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


def test_replicas_run_on_both_nodes_and_status_shows_them(cluster):
    def check():
        assert wait_until(lambda: len(load()["models"].get("tiny", {}).get("replicas", [])) == 2)
        return load()

    state = in_ns(check)
    tiny = state["models"]["tiny"]
    assert len({r["node"] for r in tiny["replicas"]}) == 2  # one replica per node
    assert tiny["slots"] == 4 and state["models"]["tiny-embed"]["slots"] >= 1
    st = json.loads(sh(str(BIN / "inferd"), "cluster", "status", "--ray", "127.0.0.1:6379", "--json").stdout)
    assert st["status"] == "RUNNING"
    assert st["models"]["model-tiny"]["replicas"] == {"RUNNING": 2}


def test_catalogs_list_every_model_and_unknown_is_404(cluster):
    def check():
        ids = [m.id for m in client().models.list().data]
        tags = [m["name"] for m in httpx.get(URL + "/api/tags").json()["models"]]
        ai = httpx.get(URL + "/ai/v1/models").json()
        miss = httpx.post(URL + "/v1/chat/completions", json={"model": "nope", "messages": HI})
        return ids, tags, ai, miss

    ids, tags, ai, miss = in_ns(check)
    assert set(ids) == {"tiny", "tiny-embed"}
    assert any(t.startswith("tiny") for t in tags)
    assert "tiny" in ai["generators"] and "tiny-embed" in ai["embedders"]
    assert miss.status_code == 404 and miss.json()["error"]["code"] == "model_not_found"


def test_chat_stream_and_embeddings_through_the_proxy_with_the_openai_client(cluster):
    from inferd.models import ModelKind, ModelSpec
    from inferd.runtimes.onnx import load_embedder
    from inferd.runtimes.options import RuntimeOptions

    def run():
        c = client()
        chat = c.chat.completions.create(model="tiny", messages=HI, max_tokens=8, temperature=0)
        again = c.chat.completions.create(model="tiny", messages=HI, max_tokens=8, temperature=0)
        chunks = list(c.chat.completions.create(model="tiny", messages=HI, max_tokens=8, temperature=0, stream=True))
        emb = c.embeddings.create(model="tiny-embed", input=["hello world", "the rain in spain"])
        return chat, again, chunks, emb

    chat, again, chunks, emb = in_ns(run)
    assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 8
    assert chat.choices[0].message.content == again.choices[0].message.content  # greedy, whichever replica
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == chat.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"
    local = load_embedder(ModelSpec("e", ModelKind.EMBEDDER, "onnx", FIX / "onnx" / "tiny-bert-embed", "test"),
                          RuntimeOptions(threads=1))
    want = local.run_batch(local.prepare(["hello world", "the rain in spain"]))
    for got, w in zip(emb.data, want):
        np.testing.assert_allclose(got.embedding, w, atol=1e-5)


def test_requests_spread_over_both_replicas_and_a_cache_key_sticks(cluster):
    def run():
        nodes, sticky = [], []
        for i in range(16):
            r = httpx.post(URL + "/v1/completions", timeout=60, json={
                "model": "tiny", "prompt": f"prompt number {i}", "max_tokens": 2})
            assert r.status_code == 200
            nodes.append(r.headers["x-inferd-node"])
        for _ in range(6):
            r = httpx.post(URL + "/v1/completions", timeout=60, json={
                "model": "tiny", "prompt": "x", "max_tokens": 2, "prompt_cache_key": "conversation-42"})
            sticky.append(r.headers["x-inferd-replica"])
        return nodes, sticky

    nodes, sticky = in_ns(run)
    assert len(set(nodes)) == 2  # prompts hash over both replicas
    assert len(set(sticky)) == 1  # one key, one replica: its prefix cache is reused


def long_stream(c: httpx.Client, n: int = 30000, **extra):
    return c.stream("POST", URL + "/v1/chat/completions", json={
        "model": "tiny", "messages": HI, "max_tokens": n, "stream": True, "ignore_eos": True, **extra})


def test_a_client_that_disconnects_cancels_the_replicas_sequence(cluster):
    def run():
        with httpx.Client(timeout=60) as c:
            with long_stream(c) as r:
                assert r.status_code == 200
                lines = r.iter_lines()
                for _ in range(5):
                    next(lines)
                running_during = wait_until(lambda: load()["models"]["tiny"]["running"] >= 1, timeout=5)
            # The client left: the replica's slot must free long before 30000 tokens are made.
            t0 = time.time()
            freed = wait_until(lambda: load()["models"]["tiny"]["running"] == 0, timeout=10)
            return running_during, freed, time.time() - t0

    running_during, freed, seconds = in_ns(run)
    assert running_during and freed, (running_during, freed, seconds)


def test_a_full_cluster_answers_503_with_retry_after(cluster):
    def one(i):
        with httpx.Client(timeout=120) as c:
            with long_stream(c, 3000, prompt_cache_key=f"k{i}") as r:
                if r.status_code != 200:
                    return r.status_code, json.loads(r.read())
                for _ in r.iter_lines():
                    pass
                return 200, None

    def run():
        with concurrent.futures.ThreadPoolExecutor(10) as ex:
            return list(ex.map(one, range(10)))

    results = in_ns(run)
    codes = [c for c, _ in results]
    assert codes.count(200) >= 2 and set(codes) <= {200, 503}, codes  # what was admitted ran to the end
    refused = [b for c, b in results if c == 503]
    assert refused, f"no request was refused: {codes}"
    assert all(b["error"]["retry_after_ms"] > 0 and b["error"]["code"] == "service_unavailable" for b in refused)


def test_killing_a_node_fails_its_streams_cleanly_and_the_next_request_succeeds(cluster):
    """Destructive: the last test. The worker node's raylet is killed mid-stream."""
    head = {r["node"] for r in in_ns(load)["models"]["tiny"]["replicas"]}
    raylet = [p for p in ns_pids() if "node_b" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")
              and "raylet" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
    assert raylet, "the worker node's raylet was not found"
    outcomes: list = []

    def one(i, started):
        with httpx.Client(timeout=120) as c:
            with long_stream(c, 8000, prompt_cache_key=f"kill{i}") as r:
                node = r.headers.get("x-inferd-node")
                lines = []
                for line in r.iter_lines():
                    if not line:
                        continue
                    lines.append(line)
                    if len(lines) == 3:
                        started.set()
                started.set()
                outcomes.append((r.status_code, node, lines[-1] if lines else ""))

    def run():
        threads = []
        for i in range(4):  # one at a time, so each is placed before the next asks (4 slots in all)
            started = threading.Event()
            threads.append(threading.Thread(target=one, args=(i, started)))
            threads[-1].start()
            assert started.wait(60)
        for p in raylet:
            os.kill(p, signal.SIGKILL)
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a stream hung after the node died"
        time.sleep(1)
        after = [httpx.post(URL + "/v1/completions", timeout=60,
                            json={"model": "tiny", "prompt": f"after {i}", "max_tokens": 2}) for i in range(3)]
        return after

    after = in_ns(run)
    assert len(head) == 2
    assert [code for code, _, _ in outcomes] == [200] * 4, outcomes
    finished = [node for _, node, last in outcomes if last == "data: [DONE]"]
    failed = [(node, last) for _, node, last in outcomes if last != "data: [DONE]"]
    assert finished, f"no stream on the surviving node completed: {outcomes}"
    assert {node for node, _ in failed}.isdisjoint(finished)  # only the dead node's streams failed
    for _, last in failed:  # a stream on the dead node ends with an error event, not a hang
        assert last.startswith("data: ") and "error" in json.loads(last[6:]), last
    assert [r.status_code for r in after] == [200, 200, 200]
