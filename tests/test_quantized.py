"""Every generation family at least once on a quantized model, so the kernels users run (Q4_0,
Q4_1, Q8_0 and Q4_K matmuls, not only F32) are the kernels the tests run: completion against
llama.cpp's own greedy decode of the same file, chat and streaming, tools, grammar, continuous
batching, speculation, LoRA and vision. Fixtures: tests/fixtures/gguf/quant (scripts/make_quant_ggufs.py)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import openai
import pytest
from llama_cpp import Llama

from inferd.runtimes.llama_cpp import selfcheck
from tests.server import serve
from tests.test_vision_http import data_uri, image_msg

GGUF = "tests/fixtures/gguf"
QUANTS = {"q4_0": "Q4_0", "q4_1": "Q4_1", "q8_0": "Q8_0", "q4_k": "Q4_K_M"}
PROMPT = "hello world the"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for q in QUANTS:
        d = root / "generators" / f"tiny-{q}"
        d.mkdir(parents=True)
        shutil.copy(f"{GGUF}/quant/tiny-{q}.gguf", d / "model.gguf")
        (d / "model_manifest.json").write_text(json.dumps({"n_ctx": 2048}))
    vlm = root / "generators" / "tiny-q8-vlm"  # 64 wide, as the tiny projector expects
    vlm.mkdir(parents=True)
    shutil.copy(f"{GGUF}/quant/tiny-q8_0.gguf", vlm / "model.gguf")
    shutil.copy(f"{GGUF}/mmproj-tiny.gguf", vlm / "mmproj-tiny.gguf")
    lora = root / "generators" / "tiny-q8-lora"
    (lora / "loras").mkdir(parents=True)
    shutil.copy(f"{GGUF}/quant/tiny-q8_0.gguf", lora / "model.gguf")
    shutil.copy(f"{GGUF}/tiny-lora.gguf", lora / "loras" / "style.gguf")
    ngram = root / "generators" / "tiny-q4k-ngram"
    ngram.mkdir(parents=True)
    shutil.copy(f"{GGUF}/quant/tiny-q4_k.gguf", ngram / "model.gguf")
    (ngram / "model_manifest.json").write_text(json.dumps({"n_ctx": 2048, "draft_model": "ngram",
                                                           "speculative_k": 3}))
    with serve(models_dir=str(root), parallel=4, threads=1, max_image_dimension=1024) as s:
        yield s


@pytest.fixture
def oai(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def reference(path: str, prompt: str, n: int, lora: str | None = None) -> str:
    """llama.cpp's own greedy continuation of `prompt` (its high-level API, one sequence), as text
    the way a server sends it (bytes of an incomplete character replaced, not dropped)."""
    llm = Llama(model_path=path, n_ctx=256, n_threads=1, verbose=False, seed=0, lora_path=lora)
    try:
        out: list[int] = []
        for tok in llm.generate(llm.tokenize(prompt.encode()), temp=0.0, top_k=1, repeat_penalty=1.0):
            if tok == llm.token_eos() or len(out) == n:
                break
            out.append(tok)
        return llm.detokenize(out).decode("utf-8", "replace")
    finally:
        llm.close()


@pytest.mark.parametrize("q", list(QUANTS))
def test_completion_equals_llama_cpp_greedy_on_each_quant_type(srv, oai, q):
    r = oai.completions.create(model=f"tiny-{q}", prompt=PROMPT, max_tokens=12, temperature=0)
    assert r.choices[0].text == reference(f"{GGUF}/quant/tiny-{q}.gguf", PROMPT, 12)
    assert r.usage.completion_tokens >= 1


def test_each_fixture_is_the_quantization_type_it_is_named_for(srv):
    assert {q: selfcheck.file_type(Path(f"{GGUF}/quant/tiny-{q}.gguf")) for q in QUANTS} == QUANTS
    httpx.post(srv.url + "/v1/completions", json={"model": "tiny-q4_1", "prompt": "a", "max_tokens": 1},
               timeout=60).raise_for_status()
    # the self-check probed this type in a child process before the server loaded it, and recorded it
    assert selfcheck.checker().verdicts()["Q4_1"]["ok"] is True


def test_chat_stream_equals_the_whole_answer_on_q4_k(oai):
    msgs = [{"role": "user", "content": "hello world"}]
    whole = oai.chat.completions.create(model="tiny-q4_k", messages=msgs, max_tokens=16, temperature=0,
                                        extra_body={"ignore_eos": True})
    parts = [c.choices[0].delta.content or "" for c in oai.chat.completions.create(
        model="tiny-q4_k", messages=msgs, max_tokens=16, temperature=0, stream=True,
        extra_body={"ignore_eos": True}) if c.choices]
    assert whole.usage.completion_tokens == 16
    assert "".join(parts) == whole.choices[0].message.content


def test_a_required_tool_call_follows_its_schema_on_q8_0(oai):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}
    r = oai.chat.completions.create(model="tiny-q8_0", messages=[{"role": "user", "content": "weather?"}],
                                    tools=[tool], tool_choice="required", max_tokens=1200, temperature=0)
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 12


def test_a_json_schema_constrains_q4_0_output(oai):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["n", "ok"], "additionalProperties": False}
    r = oai.chat.completions.create(model="tiny-q4_0", messages=[{"role": "user", "content": "json"}],
                                    max_tokens=60, temperature=0,
                                    response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema,
                                                                                             "strict": True}})
    out = json.loads(r.choices[0].message.content)
    assert set(out) == {"n", "ok"} and isinstance(out["n"], int) and isinstance(out["ok"], bool)


def test_concurrent_streams_decode_in_one_batch_on_q4_1(srv):
    async def one(c: httpx.AsyncClient) -> str:
        r = await c.post("/v1/completions", json={"model": "tiny-q4_1", "prompt": PROMPT, "max_tokens": 24,
                                                  "temperature": 0, "ignore_eos": True})
        r.raise_for_status()
        return r.json()["choices"][0]["text"]

    async def run() -> list[str]:
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
            await one(c)  # loaded
            return await asyncio.gather(*(one(c) for _ in range(4)))

    outs = asyncio.run(run())
    assert len(set(outs)) == 1 and outs[0]  # identical rows of one batch give identical greedy text
    stats = httpx.get(srv.url + "/slots", params={"model": "tiny-q4_1"}).json()
    assert isinstance(stats, list) and len(stats) == 4


def test_ngram_speculation_runs_and_accepts_drafts_on_q4_k(srv):
    passage = "the quick brown fox jumps over the lazy dog " * 6
    body = {"model": "tiny-q4k-ngram", "prompt": passage, "max_tokens": 40, "temperature": 0, "ignore_eos": True,
            "prompt_cache": False, "speculation_policy": "on"}
    r = httpx.post(srv.url + "/ai/v1/generate", json={**body, "prompt": None,
                                                        "messages": [{"role": "user", "content": passage}]},
                   timeout=60)
    assert r.status_code == 200, r.text
    sp = r.json()["speculation"]
    assert sp["draft_model"] == "ngram" and sp["drafted_tokens"] > 0
    assert r.json()["usage"]["completion_tokens"] == 40


def test_lora_on_a_q8_0_base_matches_llama_cpp_with_the_adapter(srv, oai):
    base = oai.completions.create(model="tiny-q8-lora", prompt=PROMPT, max_tokens=10, temperature=0).choices[0].text
    r = httpx.post(srv.url + "/set_lora", json={"model": "tiny-q8-lora", "name": "style"}, timeout=60)
    assert r.status_code == 200, r.text
    try:
        styled = oai.completions.create(model="tiny-q8-lora", prompt=PROMPT, max_tokens=10,
                                        temperature=0).choices[0].text
    finally:
        httpx.post(srv.url + "/unset_lora", json={"model": "tiny-q8-lora"}, timeout=60)
    assert styled != base
    assert styled == reference(f"{GGUF}/quant/tiny-q8_0.gguf", PROMPT, 10, lora=f"{GGUF}/tiny-lora.gguf")


def test_an_image_changes_the_answer_of_a_q8_0_vision_model(oai):
    def ask(seed: int) -> str:
        r = oai.chat.completions.create(model="tiny-q8-vlm", messages=image_msg(data_uri(seed)), max_tokens=10,
                                        temperature=0, extra_body={"ignore_eos": True})
        return r.choices[0].message.content

    a, b = ask(1), ask(2)
    assert a == ask(1)  # the same picture, the same answer
    assert a != b       # another picture, another answer: the image reached the quantized model
