"""Spec fields that inferd used to parse (or take as an unknown field) and drop, found by the
audit in docs/spec-coverage.md (issue 27): each is now honoured or a 400 naming it."""

import json
from pathlib import Path

import httpx
import pytest

from tests.chat_fixtures import generator_dir
from tests.server import serve
from tests.test_http_foundation import assert_envelope

FIX = Path(__file__).parent / "fixtures"
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("cov")
    generator_dir(d, "tiny", n_ctx=1024)
    with serve(models_dir=str(d), models=[f"reranker:rr={FIX / 'onnx' / 'tiny-bert-rerank'}"],
               parallel=2, threads=1) as s:
        yield s


def post(srv, path, body):
    return httpx.post(srv.url + path, json=body, timeout=60)


COMPLETION = {"model": "tiny", "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}


@pytest.mark.parametrize("field,value", [
    ("tools", [TOOL]), ("tool_choice", "required"),
    ("tool_choice", {"type": "function", "function": {"name": "get_weather"}}),
    ("chat_template", "{{ messages[0].content }}"), ("enable_thinking", True)])
def test_completions_refuse_chat_only_fields(srv, field, value):
    # openai-server's table lists tools, tool_choice and chat_template for /v1/completions too;
    # a raw prompt has no template to apply them with, so each is a 400 naming it (was: ignored).
    err = assert_envelope("openai", post(srv, "/v1/completions", {**COMPLETION, field: value}), 400)
    assert err["error"]["param"] == field
    assert "/v1/chat/completions" in err["error"]["message"]


def test_completions_accept_the_empty_values_of_chat_fields(srv):
    plain = post(srv, "/v1/completions", COMPLETION)
    empty = post(srv, "/v1/completions", {**COMPLETION, "tools": [], "tool_choice": "none",
                                          "chat_template": None, "enable_thinking": False})
    assert plain.status_code == empty.status_code == 200, empty.text
    assert plain.json()["choices"][0]["text"] == empty.json()["choices"][0]["text"]
    assert plain.json()["usage"]["completion_tokens"] == 6


def test_rerank_multimodal_echoes_document_ids(srv):
    docs = ["Paris is the capital of France.", "Bananas are yellow.", "France borders Spain."]
    r = post(srv, "/ai/v1/rerank_multimodal", {"model": "rr", "query": "capital of France", "documents": [
        {"id": "doc-a", "content": docs[0]}, {"content": [{"type": "text", "text": docs[1]}]},
        {"id": "doc-c", "content": docs[2]}]})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [d["index"] for d in data] == [0, 1, 2]
    assert [d.get("id") for d in data] == ["doc-a", None, "doc-c"]
    assert "id" not in data[1]  # none given, none invented
    # the same scores as the text-only route gives for the same prompts
    ref = post(srv, "/ai/v1/rerank", {"model": "rr", "query": "capital of France", "prompts": docs}).json()["data"]
    assert [d["score"] for d in data] == pytest.approx([d["score"] for d in ref], abs=1e-6)
    assert "id" not in ref[0]


@pytest.mark.parametrize("field,value", [("tools", [TOOL]), ("tool_choice", "required")])
def test_ollama_generate_refuses_tools(srv, field, value):
    # GenAIServer: "/api/chat also accepts tools and tool_choice"; /api/generate does not.
    body = {"model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 2}, field: value}
    assert_envelope("ollama", post(srv, "/api/generate", body), 400, f"'{field}'")
    ok = post(srv, "/api/generate", {**body, field: [] if field == "tools" else "auto"})
    assert ok.status_code == 200 and ok.json()["eval_count"] == 2, ok.text


def test_bare_completions_takes_max_completion_tokens(srv):
    # openai-server: max_tokens' alias max_completion_tokens, on /completions as on /v1/completions
    body = {"model": "tiny", "prompt": "The capital of France is", "temperature": 0}
    r = post(srv, "/completions", {**body, "max_completion_tokens": 3})
    assert r.status_code == 200, r.text
    assert r.json()["tokens_predicted"] == 3
    # n_predict, then max_tokens, win over it (llama-server's order)
    assert post(srv, "/completions", {**body, "max_completion_tokens": 3, "max_tokens": 2}).json()["tokens_predicted"] == 2


@pytest.mark.parametrize("field,value", [("tools", [TOOL]), ("tool_choice", "required"),
                                         ("chat_template", "{{ x }}")])
def test_bare_completions_refuse_chat_only_fields(srv, field, value):
    body = {"model": "tiny", "prompt": "hi", "n_predict": 2, field: value}
    err = assert_envelope("openai", post(srv, "/completions", body), 400)  # llama-server's: no `param`
    assert err["error"]["message"].startswith(field) and "/v1/chat/completions" in err["error"]["message"]


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


def test_completions_response_format_constrains_the_output(srv):
    # was taken as an unknown field and dropped: the completion came back unconstrained
    body = {**COMPLETION, "prompt": "JSON:", "max_tokens": 48}
    rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    r = post(srv, "/v1/completions", {**body, "response_format": rf})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    value = json.loads(choice["text"])
    assert set(value) == {"a"} and isinstance(value["a"], int)
    # the same tokens as llama-server's /completion json_schema (one planner, one grammar)
    native = post(srv, "/completion", {"prompt": "JSON:", "n_predict": 48, "json_schema": SCHEMA, "temperature": 0})
    assert native.json()["content"] == choice["text"]
    # json_object: any object (this random model writes one until max_tokens), so only its start is known
    obj = post(srv, "/v1/completions", {**body, "response_format": {"type": "json_object"}}).json()["choices"][0]
    plain = post(srv, "/v1/completions", body).json()["choices"][0]
    assert obj["text"].lstrip().startswith("{") and not plain["text"].lstrip().startswith("{")
    text = post(srv, "/v1/completions", {**body, "max_tokens": 6, "response_format": {"type": "text"}})
    assert text.json()["choices"][0]["text"] == post(srv, "/v1/completions", {**body, "max_tokens": 6}).json()["choices"][0]["text"]


@pytest.mark.parametrize("extra,param", [({"response_format": {"type": "xml"}}, "response_format"),
                                         ({"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'},
                                          "grammar")])
def test_completions_response_format_errors_name_the_field(srv, extra, param):
    err = assert_envelope("openai", post(srv, "/v1/completions", {**COMPLETION, **extra}), 400)
    assert err["error"]["param"] == param, err


def test_api_models_is_the_antfly_catalog(srv):
    # 003's /transcribe section: "Use the /api/models endpoint to list available models."
    a, b = httpx.get(srv.url + "/api/models"), httpx.get(srv.url + "/ai/v1/models")
    assert a.status_code == b.status_code == 200
    assert set(a.json()["generators"]) == {"tiny"} and set(a.json()["rerankers"]) == {"rr"}
    assert a.json() == b.json()


def test_genai_server_audio_form_streams_translations_too(tmp_path):
    # GenAIServer: `-F model=asr -F file=@speech.wav -F language=auto -F stream=false`; "Both
    # routes support stream=true" (the transcription stream has its own test in test_speech_http)
    import shutil

    from tests.test_speech_http import CLIPS, SPEECH, WREF
    shutil.copytree(SPEECH / "whisper-tiny-random", tmp_path / "transcribers" / "asr")
    form = {"model": "asr", "language": "auto", "beam_size": "1", "temperature_fallback": "false"}
    ref = WREF["walk.flac"]["translate"]["text"].strip()
    with serve(models_dir=str(tmp_path), threads=1) as s:
        for path in ("/v1/audio/translations", "/audio/translations"):
            with open(CLIPS / "walk.flac", "rb") as f:
                r = httpx.post(s.url + path, files={"file": ("walk.flac", f)}, data={**form, "stream": "true"}, timeout=60)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
            lines = [ln[6:] for ln in r.text.split("\n") if ln.startswith("data: ")]
            assert lines[-1] == "[DONE]"
            done = json.loads(lines[-2])
            assert done["type"] == "transcript.text.done" and done["text"] == ref
            with open(CLIPS / "walk.flac", "rb") as f:
                plain = httpx.post(s.url + path, files={"file": ("walk.flac", f)}, data={**form, "stream": "false"},
                                   timeout=60)
            assert plain.status_code == 200 and plain.json()["text"] == ref
        # a missing file is a 400 in the OpenAI envelope (GenAIServer's rule)
        err = assert_envelope("openai", httpx.post(s.url + "/v1/audio/translations", data=form, timeout=60), 400)
        assert "file" in err["error"]["message"]


def test_ollama_typical_p_reaches_the_sampler(srv):
    # options.typical_p used to be dropped: the same tokens as llama-server's /completion with it
    opts = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "seed": 11,
            "num_predict": 8}
    def gen(typical):
        body = {"model": "tiny", "prompt": "Once upon a time", "raw": True, "stream": False,
                "options": {**opts, "typical_p": typical}}
        r = post(srv, "/api/generate", body)
        assert r.status_code == 200, r.text
        return r.json()["response"]
    def native(typical):
        return post(srv, "/completion", {"prompt": "Once upon a time", "n_predict": 8, "temperature": 1.0,
                                         "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                                         "seed": 11, "typical_p": typical}).json()["content"]
    assert gen(0.2) == native(0.2) and gen(1.0) == native(1.0)
    assert gen(0.2) != gen(1.0)
    assert_envelope("ollama", post(srv, "/api/generate", {"model": "tiny", "prompt": "x", "stream": False,
                                                          "options": {"typical_p": 0}}), 400, "typical_p")
