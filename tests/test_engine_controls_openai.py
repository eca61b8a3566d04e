"""The engine controls on the OpenAI face (/v1/chat/completions, /v1/completions), as
llama-server and vLLM take their own extensions: through the official `openai` client's
`extra_body`, refused with OpenAI's error envelope when inferd cannot honour a value, and
reported in llama-server's `timings` (draft_n, draft_n_accepted)."""

import httpx
import openai
import pytest

from tests.server import serve
from tests.test_engine_controls import PASSAGE, model
from tests.test_http_foundation import assert_envelope


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("controls-openai")
    model(d, "tiny", "tiny-llama.gguf")
    with serve(models_dir=str(d), parallel=2, threads=1) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def chat(client, **extra):
    return client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": PASSAGE}],
                                          temperature=0, max_tokens=24, extra_body={"ignore_eos": True, **extra})


def test_ngram_speculation_through_extra_body_keeps_the_text_and_reports_in_timings(client):
    plain = chat(client, speculation_policy="off")
    spec = chat(client, draft_model="ngram", speculation_policy="on", speculative_k=4)
    assert spec.choices[0].message.content == plain.choices[0].message.content
    t = spec.model_extra["timings"]
    assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
    assert "draft_n" not in plain.model_extra["timings"]


def test_completions_honour_cache_dtype_and_refuse_another(srv, client):
    ok = client.completions.create(model="tiny", prompt="hello world", max_tokens=3,
                                   extra_body={"cache_dtype": "f16", "ignore_eos": True})
    assert ok.usage.completion_tokens == 3
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="hello world", max_tokens=3, extra_body={"cache_dtype": "q8_0"})
    assert e.value.status_code == 400 and "loaded with a f16 KV cache" in str(e.value)
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                                           "speculation_policy": "sometimes"}, timeout=30)
    assert_envelope("openai", r, 400, "speculation_policy")


def test_prompt_cache_off_by_either_name_reuses_no_prefix(client):
    chat(client)  # leaves this prompt's cells behind
    again = chat(client)
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    for extra in ({"prompt_cache": False}, {"cache_prompt": False}):
        r = chat(client, **extra)
        assert r.usage.prompt_tokens_details.cached_tokens == 0, extra


def test_the_two_names_of_prompt_cache_must_agree(srv):
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                                           "prompt_cache": True, "cache_prompt": False}, timeout=30)
    assert_envelope("openai", r, 400, "disagree")


def test_prompt_cache_key_is_openais_own_parameter(client):
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       prompt_cache_key="user-42")
    assert r.usage.completion_tokens <= 2
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       prompt_cache_key="k" * 300)
