"""Ollama model management through the official `ollama` client against a fake Ollama
registry and fake Hub (tests/fake_hub.py): pull with streamed progress (library names and
hf.co names), show (modelfile, template, parameters, details), the pulled model chatting
right after with its template, system prompt and default options, copy, delete, create
(from a model, from an uploaded blob), and load control (/models/load, /models/unload)."""

from __future__ import annotations

import hashlib
import json
import threading
import time

import httpx
import ollama
import pytest

from inferd.registry.discovery import discover
from inferd.registry.pull.puller import Pulled
from inferd.models import ModelKind
from tests.fake_hub import FakeHub
from tests.server import serve
from tests.test_pull_hub import REPO, SHARDS, TINY, gguf_repo

MT = "application/vnd.ollama.image."
CHATML_GO = """{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
<|im_start|>{{ .Role }}
{{ .Content }}{{ if not $last }}<|im_end|>
{{ end }}
{{- if and $last (ne .Role "assistant") }}<|im_end|>
<|im_start|>assistant
{{ end }}
{{- end }}"""
LEGACY_GO = "{{ if .System }}SYS {{ .System }}\n{{ end }}USER {{ .Prompt }}\nBOT {{ .Response }}\n"
SYSTEM = "You are tiny."
PARAMS = {"stop": ["<|im_end|>"], "temperature": 0, "num_predict": 6}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    import huggingface_hub.constants as C

    old, old_chunk = C.HF_HUB_OFFLINE, C.DOWNLOAD_CHUNK_SIZE
    C.HF_HUB_OFFLINE, C.DOWNLOAD_CHUNK_SIZE = False, 16 * 1024   # small writes: progress and cancel points
    fake = FakeHub()
    gguf_repo(fake)
    fake.add_ollama("tiny", "1m", [(MT + "model", TINY), (MT + "template", CHATML_GO.encode()),
                                   (MT + "system", SYSTEM.encode()), (MT + "params", json.dumps(PARAMS).encode()),
                                   (MT + "license", b"MIT licence text")])
    models = tmp_path_factory.mktemp("models")
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_ENDPOINT", fake.url)
    with serve(models_dir=str(models), threads=1, ollama_registry=fake.url, download_reserve_bytes=0,
               allow_downloads=True) as s:
        yield s, fake, models
    mp.undo()
    fake.close()
    C.HF_HUB_OFFLINE, C.DOWNLOAD_CHUNK_SIZE = old, old_chunk


def client(s) -> ollama.Client:
    return ollama.Client(host=s.url)


def test_pull_library_model_with_streamed_progress_then_chat(world):
    s, fake, models = world
    c = client(s)
    progress = list(c.pull("tiny:1m", stream=True))
    statuses = [p.status for p in progress]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == ["verifying sha256 digest", "writing manifest",
                                                                   "success"]
    model_digest = "sha256:" + hashlib.sha256(TINY).hexdigest()
    layer = [p for p in progress if p.digest == model_digest]
    assert layer and layer[-1].total == len(TINY) and layer[-1].completed == len(TINY)
    assert layer[0].status == f"pulling {model_digest[7:19]}"
    assert {p.digest for p in progress if p.digest} == {x["digest"] for x in
                                                        [*fake.ollama[("library", "tiny", "1m")]["layers"],
                                                         fake.ollama[("library", "tiny", "1m")]["config"]]}
    folder = models / "generators" / "registry.ollama.ai" / "library" / "tiny" / "1m"
    assert sorted(p.name for p in folder.iterdir()) == ["LICENSE", "model.gguf", "model_manifest.json"]
    assert "tiny:1m" in [m.model for m in c.list().models]
    # A server started later on this folder finds it again (discovery, not just this process).
    found = {x.name: x for x in discover(models, models / "ml", []).specs}
    assert found["tiny:1m"].manifest["system"] == SYSTEM and found["tiny:1m"].manifest["options"] == PARAMS

    # It chats right away, with the registry's template, system prompt and parameters.
    r = c.chat("tiny:1m", messages=[{"role": "user", "content": "hello world"}])
    assert r.done and r.eval_count == PARAMS["num_predict"]
    with_sys = c.chat("tiny:1m", messages=[{"role": "system", "content": SYSTEM},
                                           {"role": "user", "content": "hello world"}])
    other = c.chat("tiny:1m", messages=[{"role": "system", "content": "Something else entirely, and longer."},
                                        {"role": "user", "content": "hello world"}])
    assert r.prompt_eval_count == with_sys.prompt_eval_count != other.prompt_eval_count
    assert r.message.content == with_sys.message.content          # temperature 0 from the params layer
    # The same model by its full name: nothing is downloaded again.
    n = len([x for x in fake.log if "/blobs/" in x[1]])
    assert list(c.pull("registry.ollama.ai/library/tiny:1m", stream=True))[-1].status == "success"
    assert len([x for x in fake.log if "/blobs/" in x[1]]) == n


def test_show_reports_modelfile_template_parameters_details(world):
    s, _, _ = world
    c = client(s)
    list(c.pull("tiny:1m", stream=True))
    info = c.show("tiny:1m")
    assert info.template == CHATML_GO
    assert 'TEMPLATE """' + CHATML_GO + '"""' in info.modelfile
    assert f'SYSTEM """{SYSTEM}"""' in info.modelfile
    assert 'PARAMETER stop                           "<|im_end|>"' in info.modelfile
    assert info.parameters.splitlines() == ['stop                           "<|im_end|>"',
                                            "temperature                    0", "num_predict                    6"]
    assert (info.details.family, info.details.parameter_size, info.details.quantization_level) == \
        ("llama", "1M", "F32")
    assert info.modelinfo["general.architecture"] == "llama"


def test_copy_delete_create(world, tmp_path):
    s, _, models = world
    c = client(s)
    list(c.pull("tiny:1m", stream=True))
    c.copy("tiny:1m", "mine/tiny:v1")
    names = [m.model for m in c.list().models]
    assert "mine/tiny:v1" in names and "tiny:1m" in names
    assert c.show("mine/tiny:v1").details.parent_model == "tiny:1m"
    assert "mine/tiny:v1" in {x.name for x in discover(models, models / "ml", []).specs}   # found after a restart
    with pytest.raises(ollama.ResponseError) as e:
        c.copy("tiny:1m", "a/b/c/d:e")                     # deeper than discovery looks
    assert e.value.status_code == 400 and "invalid model name" in str(e.value)
    assert c.chat("mine/tiny:v1", messages=[{"role": "user", "content": "hi"}]).done
    with pytest.raises(ollama.ResponseError) as e:
        c.copy("tiny:1m", "mine/tiny:v1")
    assert e.value.status_code == 400 and "already exists" in str(e.value)
    c.delete("mine/tiny:v1")
    assert "mine/tiny:v1" not in [m.model for m in c.list().models]
    assert not (models / "generators" / "mine").exists()
    with pytest.raises(ollama.ResponseError) as e:
        c.delete("mine/tiny:v1")
    assert e.value.status_code == 404
    assert (models / "generators" / "registry.ollama.ai" / "library" / "tiny" / "1m" / "model.gguf").is_file()

    # create from a model, overriding system and parameters
    assert c.create(model="pirate", from_="tiny:1m", system="Talk like a pirate.",
                    parameters={"temperature": 0.5}).status == "success"
    p = c.show("pirate")
    assert 'SYSTEM """Talk like a pirate."""' in p.modelfile and "temperature                    0.5" in p.parameters
    assert p.template == CHATML_GO

    # create from an uploaded blob, with a legacy template
    gguf = tmp_path / "upload.gguf"
    gguf.write_bytes(TINY)
    digest = c.create_blob(gguf)
    assert digest == "sha256:" + hashlib.sha256(TINY).hexdigest()
    assert httpx.head(f"{s.url}/api/blobs/{digest}").status_code == 200
    steps = [x.status for x in c.create(model="blobby", files={"model.gguf": digest}, template=LEGACY_GO,
                                        stream=True)]
    assert steps[-1] == "success"
    r = c.generate("blobby", prompt="hi", options={"num_predict": 3, "temperature": 0})
    assert r.done and r.eval_count == 3
    # create from a GGUF on the server's disk
    assert c.create(model="local/tiny", from_=str(gguf), system="Local.").status == "success"
    assert c.show("local/tiny").modelfile.count('SYSTEM """Local."""') == 1
    assert c.chat("local/tiny", messages=[{"role": "user", "content": "hi"}],
                  options={"num_predict": 2}).eval_count == 2
    bad = "sha256:" + "0" * 64
    r = httpx.post(f"{s.url}/api/blobs/{bad}", content=b"not those bytes")
    assert r.status_code == 400 and "do not match" in r.json()["error"]
    with pytest.raises(ollama.ResponseError) as e:
        c.create(model="nofile", files={"model.gguf": bad})
    assert e.value.status_code == 404


def test_pull_errors(world):
    s, _, _ = world
    c = client(s)
    with pytest.raises(ollama.ResponseError) as e:
        c.pull("nothing-here:7b")
    assert e.value.status_code == 404 and "not found in the registry" in str(e.value)
    with pytest.raises(ollama.ResponseError, match="not found"):
        list(c.pull("hf.co/acme/does-not-exist:Q4_K_M", stream=True))
    with pytest.raises(ollama.ResponseError) as e:
        c.pull("Bad Name!!")
    assert e.value.status_code == 400


def test_pull_hf_model_with_progress_then_chat_and_load_control(world):
    s, fake, _ = world
    c = client(s)
    fake.faults.cut["Q4_K_M/tiny-Q4_K_M-00002-of-00003.gguf"] = 40_000   # resumed within the pull
    progress = list(c.pull(f"hf.co/{REPO}:Q4_K_M", stream=True))
    assert progress[0].status == "pulling manifest" and progress[-1].status == "success"
    done = {p.digest: p for p in progress if p.digest}
    assert sorted(p.total for p in done.values()) == sorted(x.stat().st_size for x in SHARDS)
    assert all(p.completed == p.total for p in done.values())
    name = f"{REPO}:Q4_K_M"
    # Greedy and without end-of-generation: exactly 3 tokens (with Ollama's default sampling a
    # random-weight model may end after 2, and did once).
    r = c.chat(f"hf.co/{name}", messages=[{"role": "user", "content": "hi"}],
               options={"num_predict": 3, "temperature": 0, "ignore_eos": True})
    assert r.done and r.eval_count == 3
    info = c.show(name)                                    # from the GGUF's own header
    assert info.modelinfo["llama.context_length"] == 256 and info.modelinfo["general.architecture"] == "llama"
    assert info.details.family == "llama" and info.details.quantization_level == "Q4_K_M"
    assert info.template.startswith("{% for m in messages %}<|im_start|>")
    assert "tokenizer.ggml.tokens" not in info.modelinfo
    # load control
    r = httpx.post(s.url + "/models/unload", json={"model": name})
    # one answer for /models/unload and /admin/models/unload: llama-server's fields and the console's
    assert r.json() == {"success": True, "model": name, "was_loaded": True, "unloaded": True}
    assert name not in [m.model for m in c.ps().models]
    r = httpx.post(s.url + "/models/load", json={"model": name})
    assert r.status_code == 200 and r.json()["success"] is True
    assert name in [m.model for m in c.ps().models]
    assert httpx.post(s.url + "/models/load", json={"model": "nope/nope:Q1"}).status_code == 404


def test_a_client_that_leaves_stops_the_download_and_a_later_pull_resumes(world):
    s, fake, models = world
    gguf_repo(fake, "acme/slow-GGUF")
    first = "Q4_K_M/tiny-Q4_K_M-00001-of-00003.gguf"
    fake.faults.delay[first] = 0.4                      # 64 KiB every 0.4 s
    with httpx.stream("POST", s.url + "/api/pull", json={"model": "hf.co/acme/slow-GGUF:Q4_K_M"}, timeout=30) as r:
        for line in r.iter_lines():
            if '"completed":' in line and '"completed":0' not in line:
                break                                   # some bytes arrived: now leave
    part = next((models / ".downloads").glob("*.part"))
    deadline = time.time() + 10
    while True:                                         # the transfer stops at its next chunk
        size = part.stat().st_size
        time.sleep(1.0)
        if part.stat().st_size == size or time.time() > deadline:
            break
    assert 0 < part.stat().st_size < SHARDS[0].stat().st_size
    assert not [x for x in fake.log if "slow-GGUF" in x[1] and "00002-of" in x[1]]   # nothing more was fetched
    assert "acme/slow-GGUF:Q4_K_M" not in [m.model for m in client(s).list().models]
    fake.faults.delay.clear()
    have = part.stat().st_size
    assert list(client(s).pull("hf.co/acme/slow-GGUF:Q4_K_M", stream=True))[-1].status == "success"
    gets = [rng for m, p, rng in fake.log if m == "GET" and "slow-GGUF" in p and p.endswith("00001-of-00003.gguf")]
    assert gets[-1] == f"bytes={have}-"


def test_load_failures_are_reported_on_the_event_stream(world):
    s, _, models = world
    broken = models / "generators" / "broken"
    broken.mkdir(parents=True)
    (broken / "model.gguf").write_bytes(b"GGUF this is not a model")
    s.call(s.service.models_mgr.register(Pulled("broken", broken, ModelKind.GENERATOR)))
    events: list[dict] = []
    ready = threading.Event()

    def watch() -> None:
        with httpx.stream("GET", s.url + "/models/events", timeout=30) as r:
            event = None
            for line in r.iter_lines():
                if line.startswith(": connected"):
                    ready.set()
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    events.append({"event": event, **json.loads(line[6:])})
                    if event == "failed":
                        return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    assert ready.wait(10)
    r = httpx.post(s.url + "/models/load", json={"model": "broken"}, timeout=30)
    assert r.status_code == 500 and "failed to load" in r.json()["error"]["message"]
    t.join(10)
    assert [e["event"] for e in events] == ["loading", "failed"]
    assert events[1]["model"] == "broken" and "failed to load" in events[1]["error"]
