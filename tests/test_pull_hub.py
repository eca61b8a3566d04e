"""Hub downloads against a local fake Hub (tests/fake_hub.py) through huggingface_hub:
multi-shard GGUF, resume after a cut (in one run and across runs), sha256 mismatch, a
missing repo, disk full, two concurrent pulls sharing one transfer, ONNX repos (quantized
variant preferred), and a pulled model serving right after. No test reaches the internet."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import threading
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from inferd.errors import InsufficientStorage, NotFound, UpstreamFailed
from inferd.registry.discovery import discover
from inferd.registry.pull.hub import Hub
from inferd.registry.pull.puller import Puller
from tests.fake_hub import FakeHub
from tests.server import serve

FIX = Path(__file__).parent / "fixtures"
SHARDS = sorted((FIX / "gguf" / "shards").glob("tiny-*.gguf"))
TINY = (FIX / "gguf" / "tiny-llama.gguf").read_bytes()
EMBED = FIX / "onnx" / "tiny-bert-embed"
REPO = "acme/tiny-GGUF"
Q4 = [f"Q4_K_M/tiny-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def gguf_repo(hub: FakeHub, repo: str = REPO) -> None:
    """Four quantizations as real repos lay them out. Every file is a real GGUF (the tiny F32
    model, whole or as shards); only the picker reads the quantization names."""
    files = {p: s.read_bytes() for p, s in zip(Q4, SHARDS)}
    files |= {"BF16/tiny-BF16-00001-of-00002.gguf": SHARDS[0].read_bytes(),
              "BF16/tiny-BF16-00002-of-00002.gguf": SHARDS[1].read_bytes(),
              "tiny-Q8_0.gguf": TINY, "tiny-Q2_K.gguf": TINY, "README.md": b"# tiny\n", "config.json": b"{}"}
    hub.add_repo(repo, files, pipeline_tag="text-generation")


@pytest.fixture
def hub(monkeypatch):
    import huggingface_hub.constants as C

    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)          # conftest sets offline mode for everything else
    monkeypatch.setattr(C, "DOWNLOAD_CHUNK_SIZE", 16 * 1024)  # small writes, so a cut leaves a partial file
    h = FakeHub()
    gguf_repo(h)
    yield h
    h.close()


def puller(hub: FakeHub, models: Path, **kw) -> Puller:
    kw.setdefault("verify_files", False)   # several repos here hold placeholder bytes, not models
    return Puller(models, hub=Hub(endpoint=hub.url), **kw)


def resolve_gets(hub: FakeHub, path: str) -> list[str | None]:
    return hub.gets(f"/resolve/{hub.repos[REPO].commit}/{path}")


def test_multishard_pull_layout_manifest_and_discovery(hub, tmp_path):
    events = []
    got = puller(hub, tmp_path).pull(REPO, on_event=events.append)   # no quant: non-interactive pick
    assert got.name == "acme/tiny-GGUF:Q4_K_M"
    assert got.path == tmp_path / "generators" / "acme" / "tiny-GGUF" / "Q4_K_M"
    names = sorted(p.name for p in got.path.iterdir())
    assert names == ["model_manifest.json", "tiny-Q4_K_M-00001-of-00003.gguf", "tiny-Q4_K_M-00002-of-00003.gguf",
                     "tiny-Q4_K_M-00003-of-00003.gguf"]
    m = json.loads((got.path / "model_manifest.json").read_text())
    assert (m["name"], m["type"], m["format"], m["quantization"]) == (got.name, "generator", "gguf", "Q4_K_M")
    assert m["source"]["repo"] == REPO and m["source"]["revision"] == hub.repos[REPO].commit
    for f, shard in zip(m["source"]["files"], SHARDS):
        assert f["sha256"] == hashlib.sha256(shard.read_bytes()).hexdigest() == \
            hashlib.sha256((got.path / f["path"]).read_bytes()).hexdigest()
    statuses = [e["status"] for e in events if "status" in e]
    plan = next(e["plan"] for e in events if "plan" in e)
    assert (plan["label"], plan["total"], len(plan["files"])) == ("Q4_K_M", sum(s.stat().st_size for s in SHARDS), 3)
    assert statuses[0] == "pulling manifest" and statuses[-3:] == ["verifying sha256 digest", "writing manifest",
                                                                   "success"]
    final = {e["digest"]: e for e in events if "digest" in e}
    assert sorted(e["total"] for e in final.values()) == sorted(s.stat().st_size for s in SHARDS)
    assert all(e["completed"] == e["total"] for e in final.values())
    assert [p for p in hub.log if "BF16" in p[1] or "Q8_0" in p[1] or "README" in p[1]] == []
    # Discovery serves it under the manifest's name; nothing is left in the download area.
    found = discover(tmp_path, tmp_path / "ml", [])
    assert [(s.name, s.kind.value) for s in found.specs] == [("acme/tiny-GGUF:Q4_K_M", "generator")]
    assert not [p for p in (tmp_path / ".downloads").iterdir() if not p.name.endswith(".lock")]
    # A second pull of the same revision fetches nothing.
    before = len(hub.log)
    assert puller(hub, tmp_path).pull(f"hf.co/{REPO}:Q4_K_M").path == got.path
    assert [p for p in hub.log[before:] if p[0] == "GET" and "/resolve/" in p[1]] == []


def test_file_and_quant_selectors(hub, tmp_path):
    p = puller(hub, tmp_path)
    assert p.pull(f"{REPO}:q8_0").name == f"{REPO}:Q8_0"
    got = p.pull(f"{REPO}:tiny-BF16-00002-of-00002.gguf")   # a shard brings its whole group
    assert got.name == f"{REPO}:BF16" and len(list(got.path.glob("*.gguf"))) == 2
    with pytest.raises(NotFound, match="no quantization or file 'Q6_K'.*it has: Q4_K_M, BF16, Q8_0, Q2_K"):
        p.pull(f"{REPO}:Q6_K")


def test_resume_after_a_cut_mid_file_in_one_run(hub, tmp_path):
    hub.faults.cut[Q4[1]] = 50_000          # the connection drops after 50 kB of shard 2
    got = puller(hub, tmp_path).pull(f"{REPO}:Q4_K_M")
    ranges = resolve_gets(hub, Q4[1])
    assert ranges[0] is None and len(ranges) == 2
    start = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= 50_000              # resumed where the written bytes ended, not from 0
    assert (got.path / Path(Q4[1]).name).read_bytes() == SHARDS[1].read_bytes()


def test_resume_across_runs_and_partials_are_never_served(hub, tmp_path):
    hub.faults.cut[Q4[2]] = 60_000
    hub.faults.fail[Q4[2]] = 10              # ... and the Hub stays down: this pull gives up
    with pytest.raises(UpstreamFailed):
        puller(hub, tmp_path).pull(f"{REPO}:Q4_K_M")
    parts = list((tmp_path / ".downloads").glob("*.part"))
    assert len(parts) == 1 and 0 < parts[0].stat().st_size < SHARDS[2].stat().st_size
    have = parts[0].stat().st_size
    assert discover(tmp_path, tmp_path / "ml", []).specs == []          # nothing half-pulled is served
    assert not (tmp_path / "generators").exists()
    hub.faults.fail.clear()
    got = puller(hub, tmp_path).pull(f"{REPO}:Q4_K_M")                  # the next run resumes
    assert resolve_gets(hub, Q4[2])[-1] == f"bytes={have}-"
    assert resolve_gets(hub, Q4[0]) == [None]                           # finished shards are not fetched again
    assert (got.path / Path(Q4[2]).name).read_bytes() == SHARDS[2].read_bytes()


def test_sha256_mismatch_is_removed_with_a_clear_error(hub, tmp_path):
    hub.faults.corrupt.add(Q4[1])
    with pytest.raises(UpstreamFailed, match=r"tiny-Q4_K_M-00002-of-00003.gguf: sha256 mismatch \(expected "
                                             + hashlib.sha256(SHARDS[1].read_bytes()).hexdigest()):
        puller(hub, tmp_path).pull(f"{REPO}:Q4_K_M")
    assert list((tmp_path / ".downloads").glob("*.part")) == []
    assert not (tmp_path / "generators").exists()
    hub.faults.corrupt.clear()
    assert puller(hub, tmp_path).pull(f"{REPO}:Q4_K_M").name == f"{REPO}:Q4_K_M"


def test_missing_repo_and_disk_full(hub, tmp_path):
    with pytest.raises(NotFound, match=r"repository 'acme/nothing-here' not found on http://127\.0\.0\.1"):
        puller(hub, tmp_path).pull("acme/nothing-here:Q4_K_M")
    with pytest.raises(InsufficientStorage, match="not enough disk space.*needs 445760 more bytes"):
        puller(hub, tmp_path, reserve_bytes=1 << 60).pull(f"{REPO}:Q4_K_M")
    assert [p for p in hub.log if "/resolve/" in p[1]] == []          # refused before any transfer


def test_two_concurrent_pulls_share_one_transfer(hub, tmp_path):
    hub.faults.delay[Q4[0]] = 0.05           # slow enough that the second pull arrives mid-transfer
    seen: dict[int, list[dict]] = {0: [], 1: []}
    results, errors = [], []

    def run(i: int) -> None:
        try:
            results.append(puller(hub, tmp_path).pull(f"{REPO}:Q4_K_M", on_event=seen[i].append).path)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(results) == 2 and results[0] == results[1]
    for q in Q4:
        assert resolve_gets(hub, q) == [None]     # each file crossed the network once
    assert all(seen[i][-1]["status"] == "success" for i in (0, 1))


def test_onnx_repo_prefers_the_quantized_graph_and_serves_embeddings(hub, tmp_path):
    ref = json.loads((EMBED / "reference.json").read_text())
    graph = (EMBED / "model.onnx").read_bytes()
    hub.add_repo("acme/tiny-embed", {"onnx/model_quantized.onnx": graph, "onnx/model.onnx": b"not this one",
                                     "onnx/model_fp16.onnx": b"nor this", "config.json": (EMBED / "config.json").read_bytes(),
                                     "tokenizer.json": (EMBED / "tokenizer.json").read_bytes(), "README.md": b"x"},
                 pipeline_tag="sentence-similarity", config={"architectures": ["BertModel"]})
    got = puller(hub, tmp_path).pull("acme/tiny-embed")
    assert (got.name, got.kind.value) == ("acme/tiny-embed", "embedder")
    assert sorted(p.relative_to(got.path).as_posix() for p in got.path.rglob("*") if p.is_file()) == \
        ["config.json", "model_manifest.json", "onnx/model_quantized.onnx", "tokenizer.json"]
    with serve(models_dir=str(tmp_path), threads=1) as s:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        out = c.embeddings.create(model="acme/tiny-embed", input=ref["sentences"][:2], encoding_format="float")
        for d, want in zip(out.data, ref["mean"][:2]):
            assert float(np.dot(d.embedding, want) / np.linalg.norm(want)) > 0.9999
    with pytest.raises(Exception, match="ONNX repo: it has no quantizations"):
        puller(hub, tmp_path).pull("acme/tiny-embed:Q4_K_M")


def test_allow_downloads_off_and_on(hub, tmp_path):
    name = f"hf.co/{REPO}:Q8_0"
    msg = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}
    with serve(models_dir=str(tmp_path), threads=1) as s:             # default: off
        assert httpx.get(s.url + "/ai/v1/models").json()["allow_downloads"] is False
        r = httpx.post(s.url + "/v1/chat/completions", json=msg)
        assert r.status_code == 404 and "not found" in r.json()["error"]["message"]
    assert hub.log == []
    import os

    os.environ["HF_ENDPOINT"] = hub.url
    try:
        with serve(models_dir=str(tmp_path), threads=1, allow_downloads=True, download_reserve_bytes=0) as s:
            assert httpx.get(s.url + "/ai/v1/models").json()["allow_downloads"] is True
            # Catalogs do not list (or show) what is not downloaded yet.
            assert httpx.get(f"{s.url}/v1/models/{name}").status_code == 404
            assert httpx.post(s.url + "/api/show", json={"model": name}).status_code == 404
            assert httpx.post(s.url + "/models/unload", json={"model": name}).status_code == 404
            assert hub.log == []
            events: list[str] = []
            ready = threading.Event()

            def watch() -> None:
                with httpx.stream("GET", s.url + "/models/events", timeout=60) as r:
                    for line in r.iter_lines():
                        if line.startswith(": connected"):
                            ready.set()
                        if line.startswith("event: "):
                            events.append(line[7:])
                            if line == "event: loaded":
                                return

            w = threading.Thread(target=watch, daemon=True)
            w.start()
            assert ready.wait(10)
            # Two requests at once for the missing model: one download, both answered.
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                rs = list(pool.map(lambda _: httpx.post(s.url + "/v1/chat/completions", json=msg, timeout=60), [0, 1]))
            assert [r.status_code for r in rs] == [200, 200], [r.text for r in rs]
            assert all(r.json()["usage"]["completion_tokens"] == 4 for r in rs)
            assert len(hub.gets("/tiny-Q8_0.gguf")) == 1
            w.join(10)
            assert events[0] == "downloading" and events[-2:] == ["loading", "loaded"]
            assert "acme/tiny-GGUF:Q8_0" in [m["id"] for m in httpx.get(s.url + "/v1/models").json()["data"]]
            # A second request uses the downloaded model; nothing is fetched again.
            n = len(hub.log)
            assert httpx.post(s.url + "/v1/chat/completions", json=msg, timeout=60).status_code == 200
            assert len(hub.log) == n
    finally:
        del os.environ["HF_ENDPOINT"]
    assert (tmp_path / "generators" / "acme" / "tiny-GGUF" / "Q8_0" / "tiny-Q8_0.gguf").read_bytes() == TINY


def test_a_new_revision_fetches_only_changed_files(hub, tmp_path):
    p = puller(hub, tmp_path)
    p.pull(f"{REPO}:Q4_K_M")
    repo = hub.repos[REPO]
    repo.commit = "fedcba9876543210fedcba9876543210fedcba98"
    changed = bytearray(repo.files[Q4[2]])
    changed[-1] ^= 0x01                              # the last byte of the last shard's tensor data
    repo.files[Q4[2]] = bytes(changed)
    n = len(hub.log)
    got = p.pull(f"{REPO}:Q4_K_M")
    fetched = [x[1].rsplit("/", 1)[-1] for x in hub.log[n:] if x[0] == "GET" and "/resolve/" in x[1]]
    assert fetched == ["tiny-Q4_K_M-00003-of-00003.gguf"]
    m = json.loads((got.path / "model_manifest.json").read_text())
    assert m["source"]["revision"] == repo.commit
    assert (got.path / "tiny-Q4_K_M-00003-of-00003.gguf").read_bytes() == bytes(changed)


def test_onnx_kinds_come_from_the_kinds_table_and_the_kind_override(hub, tmp_path):
    """Architecture markers, pipeline tags and pull formats are the KindSpecs' (inferd/kinds):
    a CTC speech model is a transcriber by its architecture alone, a token classifier (by its
    architecture or its pipeline tag) must be told chunker or extractor, and an ONNX generator
    is refused (generators pull as GGUF)."""
    from inferd.errors import InvalidInput, NotImplementedYet
    from inferd.models import ModelKind

    side = {"config.json": b"{}", "tokenizer.json": (EMBED / "tokenizer.json").read_bytes()}
    hub.add_repo("acme/rr", {"model.onnx": b"graph", **side}, config={"architectures": ["BertForSequenceClassification"]})
    hub.add_repo("acme/tok", {"onnx/model.onnx": b"graph", **side},
                 config={"architectures": ["BertForTokenClassification"]})
    hub.add_repo("acme/ctc", {"model.onnx": b"graph", **side}, config={"architectures": ["Wav2Vec2ForCTC"]})
    hub.add_repo("acme/ner", {"model.onnx": b"graph", **side}, pipeline_tag="token-classification")
    hub.add_repo("acme/gen-onnx", {"model.onnx": b"graph", **side}, pipeline_tag="text-generation",
                 config={"architectures": ["LlamaForCausalLM"]})
    p = puller(hub, tmp_path)
    assert p.pull("acme/rr").path == tmp_path / "rerankers" / "acme" / "rr"
    assert p.pull("acme/ctc").path == tmp_path / "transcribers" / "acme" / "ctc"
    for repo, marker in (("acme/tok", "TokenClassification"), ("acme/ner", "token-classification")):
        with pytest.raises(InvalidInput, match=f"{marker} model may be a chunker or an extractor; say which with --kind"):
            p.pull(repo)
    assert p.pull("acme/tok", kind=ModelKind.CHUNKER).path == tmp_path / "chunkers" / "acme" / "tok"
    assert p.pull("acme/ner", kind=ModelKind.EXTRACTOR).path == tmp_path / "extractors" / "acme" / "ner"
    with pytest.raises(NotImplementedYet, match="is an ONNX generator; inferd runs generators from GGUF"):
        p.pull("acme/gen-onnx")


def test_the_matching_mmproj_travels_with_the_group(hub, tmp_path):
    hub.add_repo("acme/vlm-GGUF", {"vlm-Q4_K_M.gguf": TINY, "vlm-Q8_0.gguf": TINY, "mmproj-vlm-Q8_0.gguf": b"p8",
                                   "mmproj-vlm-F16.gguf": b"p16"})
    got = puller(hub, tmp_path).pull("acme/vlm-GGUF:Q8_0")
    assert sorted(p.name for p in got.path.glob("*.gguf")) == ["mmproj-vlm-F16.gguf", "vlm-Q8_0.gguf"]
    spec = discover(tmp_path, tmp_path / "ml", []).specs[0]
    assert spec.name == "acme/vlm-GGUF:Q8_0" and "vision" in spec.capabilities


def test_two_quantizations_pulled_at_once_share_their_projector(hub, tmp_path):
    proj = bytes(range(256)) * 512                       # 128 KiB, slow: both pulls wait on one transfer
    hub.add_repo("acme/vlm2-GGUF", {"vlm-Q4_K_M.gguf": TINY, "vlm-Q8_0.gguf": TINY, "mmproj-F16.gguf": proj})
    hub.faults.delay["mmproj-F16.gguf"] = 0.3
    out, errors = {}, []

    def run(q: str) -> None:
        try:
            out[q] = puller(hub, tmp_path).pull(f"acme/vlm2-GGUF:{q}").path
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(q,)) for q in ("Q4_K_M", "Q8_0")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(hub.gets("/mmproj-F16.gguf")) == 1
    for q in ("Q4_K_M", "Q8_0"):
        assert (out[q] / "mmproj-F16.gguf").read_bytes() == proj
    assert [p.name for p in (tmp_path / ".downloads").iterdir() if not p.name.endswith(".lock")] == []
