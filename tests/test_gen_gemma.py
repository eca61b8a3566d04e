"""The built-in gemma-3-270m default (a real model from a PyPI package) through the official
clients: chat with the built-in Gemma template, streaming, and eight concurrent streams
that must all finish independently and coherently. Few tokens each, to stay quick."""

import asyncio

import httpx
import ollama
import openai
import pytest


pytestmark = pytest.mark.slow

MODEL = "gemma-3-270m"
CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Germany": "Berlin", "Spain": "Madrid",
            "Egypt": "Cairo", "Russia": "Moscow", "England": "London"}


def few_shot(country: str) -> str:
    return f"The capital of Portugal is Lisbon. The capital of {country} is"


@pytest.fixture
def srv(gemma_srv):
    return gemma_srv


def test_completion_knows_a_capital(srv):
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    r = oai.completions.create(model=MODEL, prompt=few_shot("France"), max_tokens=3, temperature=0)
    assert r.choices[0].text.strip().startswith("Paris")


def test_openai_chat_uses_the_builtin_gemma_template(srv):
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    msgs = [{"role": "user", "content": "Name a fruit."}]
    r = oai.chat.completions.create(model=MODEL, messages=msgs, max_tokens=6, temperature=0)
    assert r.choices[0].message.content and r.choices[0].finish_reason in ("stop", "length")
    rendered = "<bos><start_of_turn>user\nName a fruit.<end_of_turn>\n<start_of_turn>model\n"
    ids = httpx.post(srv.url + "/tokenize", json={"model": MODEL, "content": rendered}).json()["tokens"]
    assert ids[0] == 2 and ids[1] != 2 and r.usage.prompt_tokens == len(ids)  # one BOS, turn markers parsed
    chunks = list(oai.chat.completions.create(model=MODEL, messages=msgs, max_tokens=6, temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content
    again = oai.chat.completions.create(model=MODEL, messages=msgs, max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1


def test_ollama_client_chat_and_stream(srv):
    cl = ollama.Client(host=srv.url)
    msgs = [{"role": "user", "content": "Say hello."}]
    r = cl.chat(model=MODEL, messages=msgs, options={"num_predict": 5, "temperature": 0})
    assert r.done and r.message.content and r.eval_count <= 5
    parts = list(cl.chat(model=MODEL, messages=msgs, options={"num_predict": 5, "temperature": 0}, stream=True))
    assert "".join(p.message.content for p in parts) == r.message.content and parts[-1].done
    g = cl.generate(model=MODEL, prompt=few_shot("Japan"), raw=True, options={"num_predict": 3, "temperature": 0})
    assert "Tokyo" in g.response


def test_eight_concurrent_streams_are_independent_and_coherent(srv):
    async def one(country: str) -> str:
        client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        async with client:
            stream = await client.completions.create(model=MODEL, prompt=few_shot(country), max_tokens=4,
                                                     temperature=0, stream=True)
            return "".join([c.choices[0].text async for c in stream if c.choices])

    async def all_at_once():
        return await asyncio.gather(*(one(c) for c in CAPITALS))

    outs = asyncio.run(all_at_once())
    assert all(len(t.strip()) >= 3 and t.isprintable() for t in outs), outs  # all complete, readable
    for (country, capital), text in zip(CAPITALS.items(), outs):
        others = [c for c in CAPITALS.values() if c != capital]
        assert not any(c in text for c in others), (country, text)  # no stream got another's answer
    # Quantized CPU kernels are not batch-invariant, so a batched answer may differ from the
    # one alone (Russia -> "St. Petersburg" happens); nearly all must still be right.
    right = sum(capital in text for capital, text in zip(CAPITALS.values(), outs))
    assert right >= 6, list(zip(CAPITALS, outs))
