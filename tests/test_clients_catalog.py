"""The official clients against the catalog routes (the chat/embed faces test theirs)."""

import ollama
import openai
import pytest

from tests.server import serve


@pytest.fixture(scope="module")
def srv():
    with serve(api_key="k", models=["tiny=tests/fixtures/gguf/tiny-llama.gguf"]) as s:
        yield s


def test_openai_client_lists_and_gets_models(srv):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="k")
    ids = [m.id for m in client.models.list()]
    assert ids == ["tiny"]
    assert client.models.retrieve("tiny").owned_by == "inferd"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("ghost")
    assert "'ghost' not found" in e.value.message
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong").models.list()


def test_ollama_client_lists_models(srv):
    client = ollama.Client(host=srv.url, headers={"Authorization": "Bearer k"})
    listed = client.list()
    assert [m.model for m in listed.models] == ["tiny:latest"]  # Ollama names are name:tag
    assert listed.models[0].details.format == "gguf" and listed.models[0].size > 400_000
    assert client.ps().models == []
    with pytest.raises(ollama.ResponseError) as e:
        client.show("ghost")
    assert e.value.status_code == 404 and "'ghost' not found" in e.value.error
