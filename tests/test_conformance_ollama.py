"""The Ollama face as Ollama's clients expect it: logprobs on /api/chat and /api/generate,
`name:tag` names (listed as name:latest, both forms accepted everywhere), /api/show with the
template in use and real capabilities, /api/version answering an Ollama API version.
On the tiny fixtures over real HTTP, through the official `ollama` client."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import ollama
import openai
import pytest

import inferd
from tests.chat_fixtures import HI, THINK_TEMPLATE, generator_dir
from tests.server import serve

FIX = Path(__file__).parent / "fixtures"
ONNX = FIX / "onnx"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")                                  # the GGUF's own ChatML template
    generator_dir(d, "thinker", chat_template=THINK_TEMPLATE)  # a manifest template that can think
    models = [f"embedder:tiny-embed={ONNX / 'tiny-bert-embed'}"]
    with serve(models_dir=str(d), models=models, parallel=4, threads=1) as s:
        yield s


@pytest.fixture
def client(srv):
    return ollama.Client(host=srv.url)


def check_logprobs(lps, n_tokens: int, top: int, greedy: bool) -> None:
    assert len(lps) == n_tokens
    for t in lps:
        assert isinstance(t.token, str) and t.logprob <= 0
        alts = t.top_logprobs or []
        assert len(alts) == top
        values = [a.logprob for a in alts]
        assert values == sorted(values, reverse=True)
        if greedy:  # the sampled token is the most likely one
            assert t.logprob == pytest.approx(values[0]) and t.token == alts[0].token


# ---- logprobs -----------------------------------------------------------------------------------
def test_chat_logprobs(client):
    r = client.chat(model="tiny", messages=HI, logprobs=True, top_logprobs=3,
                    options={"temperature": 0, "repeat_penalty": 1.0, "num_predict": 8})
    check_logprobs(r.logprobs, r.eval_count, 3, greedy=True)
    stream = list(client.chat(model="tiny", messages=HI, logprobs=True, top_logprobs=3, stream=True,
                              options={"temperature": 0, "repeat_penalty": 1.0, "num_predict": 8}))
    streamed = [t for part in stream for t in (part.logprobs or [])]
    assert [t.token for t in streamed] == [t.token for t in r.logprobs]
    # (a cached prefix changes the batch the prompt ran in: last bits differ, as docs/generation.md says)
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in r.logprobs], abs=1e-3)
    assert client.chat(model="tiny", messages=HI, options={"num_predict": 2}).logprobs is None  # only when asked


def test_generate_logprobs(client, srv):
    r = client.generate(model="tiny", prompt="hello world", raw=True, logprobs=True, top_logprobs=2,
                        options={"temperature": 0, "repeat_penalty": 1.0, "num_predict": 6})
    check_logprobs(r.logprobs, r.eval_count, 2, greedy=True)
    assert "".join(t.token for t in r.logprobs) == r.response
    parts = list(client.generate(model="tiny", prompt="hello world", raw=True, logprobs=True, stream=True,
                                 options={"temperature": 0, "repeat_penalty": 1.0, "num_predict": 6}))
    assert [t.token for p in parts for t in (p.logprobs or [])] == [t.token for t in r.logprobs]
    raw = httpx.post(srv.url + "/api/generate", json={"model": "tiny", "prompt": "x", "stream": False,
                                                      "logprobs": True, "options": {"num_predict": 2}}).json()
    assert set(raw["logprobs"][0]) == {"token", "logprob", "bytes", "top_logprobs"}  # Ollama's shape
    bad = httpx.post(srv.url + "/api/chat", json={"model": "tiny", "messages": HI, "top_logprobs": 3})
    assert bad.status_code == 400 and "logprobs" in bad.json()["error"]
    assert httpx.post(srv.url + "/api/chat", json={"model": "tiny", "messages": HI, "logprobs": True,
                                                   "top_logprobs": 21}).status_code == 400


# ---- names ----------------------------------------------------------------------------------------
def test_models_are_listed_as_name_latest_and_both_forms_work_everywhere(client, srv):
    assert sorted(m.model for m in client.list().models) == ["thinker:latest", "tiny-embed:latest", "tiny:latest"]
    for name in ("tiny", "tiny:latest"):
        r = client.chat(model=name, messages=HI, options={"num_predict": 2})
        assert r.model == "tiny:latest" and r.done
        assert client.generate(model=name, prompt="x", options={"num_predict": 1}).model == "tiny:latest"
        assert client.show(name).capabilities[0] == "completion"
    assert len(client.embed(model="tiny-embed:latest", input="x").embeddings[0]) == 32
    assert client.embed(model="tiny-embed", input="x").model == "tiny-embed:latest"
    loaded = client.ps().models
    assert "tiny:latest" in [m.model for m in loaded]
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")  # the OpenAI face accepts the tagged name too
    assert oai.chat.completions.create(model="tiny:latest", messages=HI, max_tokens=1).model == "tiny"
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="tiny:7b", messages=HI)
    assert e.value.status_code == 404


# ---- show and version --------------------------------------------------------------------------------
def test_show_gives_the_template_in_use_and_real_capabilities(client, srv):
    tiny = client.show("tiny")
    assert tiny.template.startswith("{% for m in messages %}<|im_start|>")  # the GGUF's own template
    assert tiny.capabilities == ["completion", "tools"]  # tools: written into the prompt if the template does not
    thinker = client.show("thinker:latest")
    assert thinker.template == THINK_TEMPLATE and thinker.capabilities == ["completion", "tools", "thinking"]
    assert client.show("tiny-embed").capabilities == ["embedding"]
    # loaded or not, the same answer (loaded: the runtime's own choice)
    client.chat(model="thinker", messages=HI, options={"num_predict": 1})
    assert client.show("thinker").template == THINK_TEMPLATE


def test_show_of_a_generator_without_a_template(tmp_path):
    import shutil

    d = tmp_path / "generators"
    d.mkdir()
    # the tiny GGUF has a template; a manifest cannot remove it, so check the rule itself
    from inferd.registry.discovery import make_spec
    from inferd.models import ModelKind
    from inferd.service.model_info import capabilities

    shutil.copy(FIX / "gguf" / "tiny-llama.gguf", d / "t.gguf")
    spec = make_spec("t", d / "t.gguf", "cli", ModelKind.GENERATOR)
    assert capabilities(spec, None) == ["completion"]  # no template: no chat, so no tools


def test_version_is_an_ollama_api_version_with_inferd_beside_it(srv):
    v = httpx.get(srv.url + "/api/version").json()
    major, minor, patch = (int(x) for x in v["version"].split("."))
    assert (major, minor) >= (0, 12) and v["inferd_version"] == inferd.__version__
    assert json.dumps(v)  # plain JSON
