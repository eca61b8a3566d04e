"""Fill-in-the-middle over real HTTP on a tiny GGUF that names Qwen2.5-Coder's six FIM tokens
(scripts/make_tiny_gguf.py --fim): the prompt of /infill, Ollama's `suffix` and OpenAI's
`suffix`, token for token against llama-server's layout (repo-level: <|repo_name|> and
<|file_sep|> around the input_extra chunks, then prefix / suffix / middle), its budgets, the
SSE stream of /infill, and a clear 400 from a model without FIM tokens on every route."""

from __future__ import annotations

import json
import shutil

import httpx
import openai
import pytest

from inferd.runtimes.llama_cpp.model import LlamaModel
from tests.chat_fixtures import FIXTURES, TINY
from tests.server import serve
from tests.test_http_foundation import assert_envelope

FIM_GGUF = FIXTURES / "tiny-fim.gguf"
N_CTX = 1024
GREEDY = {"temperature": 0, "n_predict": 12}


@pytest.fixture(scope="module")
def vocab():
    m = LlamaModel(FIM_GGUF)
    yield m
    m.close()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    for name, src in [("coder", FIM_GGUF), ("plain", TINY)]:
        g = d / "generators" / name
        g.mkdir(parents=True)
        shutil.copy(src, g / "model.gguf")
        (g / "model_manifest.json").write_text(json.dumps({"n_ctx": N_CTX}))
    with serve(models_dir=str(d), parallel=2, threads=1) as s:
        yield s


def tok(vocab, text):
    return vocab.tokenize(text, add_special=False, parse_special=False)


def expected(vocab, prefix, suffix, prompt="", extra=()):
    """llama-server's repo-level layout, written out by hand from the GGUF's ids."""
    f = vocab.fim_tokens
    out = [vocab.bos, f["rep"], *tok(vocab, "myproject\n")]
    for name, text in extra:
        out += [f["sep"], *tok(vocab, name + "\n"), *tok(vocab, text)]
    out += [f["sep"], *tok(vocab, "filename\n")]
    return out + [f["pre"], *tok(vocab, prefix), f["suf"], *tok(vocab, suffix), f["mid"], *tok(vocab, prompt)]


def ollama_prompt(srv, **body):
    """The prompt ids Ollama reports (`context` = prompt + output), and the output text."""
    r = httpx.post(srv.url + "/api/generate", json={"model": "coder", "stream": False,
                                                     "options": {"temperature": 0, "num_predict": 12}, **body},
                   timeout=60)
    assert r.status_code == 200, r.text
    j = r.json()
    return j["context"][:j["prompt_eval_count"]], j["response"]


def infill(srv, **body):
    r = httpx.post(srv.url + "/infill", json={"model": "coder", **GREEDY, **body}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_gguf_names_six_fim_tokens(vocab):
    f = vocab.fim_tokens
    assert {k: vocab.token_text(v) for k, v in f.items()} == {
        "pre": "<|fim_prefix|>", "suf": "<|fim_suffix|>", "mid": "<|fim_middle|>", "pad": "<|fim_pad|>",
        "rep": "<|repo_name|>", "sep": "<|file_sep|>"}


def test_ollama_suffix_prompt_is_the_fim_layout_token_for_token(srv, vocab):
    ids, _text = ollama_prompt(srv, prompt="def hello(", suffix="\n    return world\n")
    assert ids == expected(vocab, "def hello(", "\n    return world\n")
    # text that only looks like a FIM marker stays text: it cannot forge the layout
    ids, _ = ollama_prompt(srv, prompt="a<|fim_middle|>b", suffix="c")
    assert ids == expected(vocab, "a<|fim_middle|>b", "c") and ids.count(vocab.fim_tokens["mid"]) == 1


def test_infill_with_repository_chunks_equals_its_prompt_as_token_ids(srv, vocab):
    extra = [("utils.py", "def world():\n    return 1\n"), ("README", "hello world")]
    body = {"input_prefix": "def hello(", "input_suffix": "\n    return x\n", "prompt": "wor",
            "input_extra": [{"filename": n, "text": t} for n, t in extra]}
    got = infill(srv, **body, return_tokens=True)
    ids = expected(vocab, "def hello(", "\n    return x\n", "wor", extra)
    assert got["tokens_evaluated"] == len(ids) and got["stop"] is True and got["model"] == "coder"
    assert got["stop_type"] in ("eos", "limit") and got["tokens_predicted"] == len(got["tokens"]) > 0
    # the same ids sent as a token prompt give the same greedy completion: the prompt was exactly these
    r = httpx.post(srv.url + "/v1/completions", json={"model": "coder", "prompt": ids, "max_tokens": 12,
                                                       "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == got["content"]


def test_openai_suffix_matches_infill_and_ollama(srv, vocab):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
    c = client.completions.create(model="coder", prompt="def hello(", suffix="\n    return 1\n", max_tokens=12,
                                  temperature=0)
    ids, text = ollama_prompt(srv, prompt="def hello(", suffix="\n    return 1\n")
    assert c.usage.prompt_tokens == len(ids) == len(expected(vocab, "def hello(", "\n    return 1\n"))
    assert c.choices[0].text == text == infill(srv, input_prefix="def hello(", input_suffix="\n    return 1\n")["content"]


def test_budgets_cut_the_prefix_start_and_the_suffix_end(srv, vocab):
    # n_batch 512: the prefix keeps its last 384 tokens, the suffix its first 128 - 2 - len(prompt)
    prefix = "".join(f"x{i} " for i in range(400))
    suffix = "".join(f"y{i} " for i in range(200))
    ids, _ = ollama_prompt(srv, prompt=prefix, suffix=suffix)
    f = vocab.fim_tokens
    p, s = tok(vocab, prefix), tok(vocab, suffix)
    assert len(p) > 384 and len(s) > 126
    head = expected(vocab, "", "")[:-3]  # BOS and the repo header
    assert ids == head + [f["pre"], *p[-384:], f["suf"], *s[:126], f["mid"]]


def test_infill_stream_is_llama_servers_sse(srv):
    body = {"model": "coder", **GREEDY, "input_prefix": "def hello(", "input_suffix": "\n", "stream": True}
    whole = infill(srv, **{k: v for k, v in body.items() if k != "stream"})
    frames, lines = [], []
    with httpx.stream("POST", srv.url + "/infill", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data: "):
                frames.append(json.loads(line[6:]))
    assert "data: [DONE]" not in lines  # llama-server's own stream ends with stop: true
    assert all(f["stop"] is False for f in frames[:-1]) and frames[-1]["stop"] is True
    assert "".join(f["content"] for f in frames) == whole["content"]
    assert frames[-1]["tokens_predicted"] == whole["tokens_predicted"]
    assert frames[-1]["timings"]["predicted_n"] == whole["tokens_predicted"]


def test_a_model_without_fim_tokens_is_a_400_naming_them(srv):
    need = "tokenizer.ggml.fim_pre_token_id, tokenizer.ggml.fim_suf_token_id, tokenizer.ggml.fim_mid_token_id"
    r = httpx.post(srv.url + "/infill", json={"model": "plain", "input_prefix": "a", "input_suffix": "b"})
    assert_envelope("openai", r, 400, need)
    assert "input_suffix" in r.json()["error"]["message"]
    r = httpx.post(srv.url + "/v1/completions", json={"model": "plain", "prompt": "a", "suffix": "b"})
    assert_envelope("openai", r, 400, need)
    r = httpx.post(srv.url + "/api/generate", json={"model": "plain", "prompt": "a", "suffix": "b", "stream": True})
    assert_envelope("ollama", r, 400, need)
    # the streamed /infill is refused before any byte, with the same status
    r = httpx.post(srv.url + "/infill", json={"model": "plain", "input_prefix": "a", "stream": True})
    assert r.status_code == 400


def test_bad_infill_bodies(srv):
    r = httpx.post(srv.url + "/infill", json={"model": "coder", "input_extra": [{"filename": "a.py"}]})
    assert_envelope("openai", r, 400, "input_extra.0.text")
    r = httpx.post(srv.url + "/infill", json={"model": "coder", "input_extra": "x"})
    assert_envelope("openai", r, 400, "input_extra")
    r = httpx.post(srv.url + "/v1/completions", json={"model": "coder", "prompt": [1, 2], "suffix": "b"})
    assert_envelope("openai", r, 400, "suffix needs a text prompt")
    r = httpx.post(srv.url + "/api/generate", json={"model": "coder", "prompt": "a", "suffix": "b", "system": "s"})
    assert_envelope("ollama", r, 400, "cannot be combined with 'system'")
    r = httpx.post(srv.url + "/infill", json={"model": "ghost", "input_prefix": "a"})
    assert_envelope("openai", r, 404, "ghost")
