"""The Antfly spec's own example request bodies, run against a real server (issue 27).

Each body is copied from the spec (../shared/spec/003_*: "Request Body / Example") with only
its placeholders made real: `model` names a served fixture, the `messages` placeholder
(`{"role": null, "content": null, "tool_calls": [null]}`) becomes one user message, and the
`"string"` placeholders of `grammar` and `draft_model` become the Go zero value `""`. The zero
values the example sends (`top_p: 0`, `repetition_penalty: 0`, `dimensions: 0`, `top_k: 0`,
`min_p: 0`, `cache_compaction_ratio: 0`) and its runtime selection (`backend: auto`,
`mode: eager`, `compiled_target: partitioned`) are kept as written."""

import copy
import shutil
import json
from pathlib import Path

import httpx
import pytest

from tests.chat_fixtures import THINK_TEMPLATE, generator_dir
from tests.server import serve
from tests.test_http_foundation import assert_envelope

FIX = Path(__file__).parent / "fixtures"
EMB = json.loads((FIX / "onnx" / "tiny-bert-embed" / "reference.json").read_text())

# /ai/v1/generate and /ai/v1/chat/completions: the spec's example, as written there.
GENERATE = {
    "model": "google/gemma-3-1b-it",
    "messages": [{"role": None, "content": None, "tool_calls": [None], "tool_call_id": "string"}],
    "max_tokens": 256, "temperature": 0.7, "top_p": 0, "top_k": 0, "stream": True,
    "stream_options": {"include_usage": True}, "chat_template_kwargs": {"enable_thinking": True},
    "ignore_eos": True,
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a location",
        "parameters": {"type": "object", "properties": {"location": {
            "type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
            "required": ["location"]},
        "strict": True}}],
    "min_p": 0, "repetition_penalty": 0, "frequency_penalty": -2, "presence_penalty": -2,
    "response_format": {"type": "text", "json_schema": {"name": "string", "strict": True, "schema": {}}},
    "grammar": "string", "draft_model": "string", "speculative_k": 1, "speculation_policy": "auto",
    "speculation_calibration": "none", "cache_dtype": "f16", "cache_compaction_ratio": 0,
    "prompt_cache_key": "string", "prompt_cache": True, "backend": "auto", "mode": "eager",
    "compiled_target": "partitioned", "tool_choice": "auto",
}
# /ai/v1/embed and /ai/v1/embeddings
EMBED = {"model": "string", "input": "string", "encoding_format": "float", "dimensions": 0,
         "task_type": "RETRIEVAL_QUERY", "input_type": "search_query", "error_policy": "fail_fast"}


def made_real(body: dict, model: str) -> dict:
    """The example with its placeholders filled (see the module docstring), nothing else."""
    b = copy.deepcopy(body)
    b["model"] = model
    if "messages" in b:
        b["messages"] = [{"role": "user", "content": "What is the weather in Paris?"}]
    for k in ("grammar", "draft_model"):
        if b.get(k) == "string":
            b[k] = ""
    if b.get("input") == "string":
        b["input"] = EMB["sentences"][0]
    return b


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    # the example asks to think (chat_template_kwargs.enable_thinking): a template that can
    generator_dir(d, "tiny", n_ctx=2048, chat_template=THINK_TEMPLATE)
    generator_dir(d, "plain", n_ctx=2048)  # ChatML, cannot think: the answer is all content
    with serve(models_dir=str(d), models=[f"embedder:tiny-embed={FIX / 'onnx' / 'tiny-bert-embed'}"],
               parallel=2, threads=1) as s:
        yield s


def sse_events(r: httpx.Response) -> list:
    out = []
    for line in r.text.splitlines():
        if line.startswith("data: "):
            out.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
    return out


@pytest.mark.parametrize("path", ["/ai/v1/generate", "/ai/v1/chat/completions"])
def test_generate_example_body_streams(srv, path):
    body = made_real(GENERATE, "tiny")
    r = httpx.post(srv.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    usage = [e["usage"] for e in events[:-1] if e.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 256  # ignore_eos: all 256 tokens


def test_generate_example_zero_values_read_as_unset(srv):
    # top_p 0 / repetition_penalty 0 read as unset: the same tokens as the body without them
    base = {**made_real(GENERATE, "tiny"), "stream": False, "max_tokens": 12, "temperature": 0, "tools": None,
            "tool_choice": None, "presence_penalty": 0, "frequency_penalty": 0, "seed": 3}
    without = {k: v for k, v in base.items() if k not in ("top_p", "repetition_penalty", "grammar", "draft_model")}
    a = httpx.post(srv.url + "/ai/v1/generate", json=base, timeout=60)
    b = httpx.post(srv.url + "/ai/v1/generate", json=without, timeout=60)
    assert a.status_code == b.status_code == 200, a.text
    assert a.json()["choices"][0]["message"]["content"] == b.json()["choices"][0]["message"]["content"]
    # a real value is still checked, and an unusable one still refused
    assert_envelope("antfly", httpx.post(srv.url + "/ai/v1/generate", json={**base, "top_p": 1.5}), 400, "top_p")
    assert_envelope("antfly", httpx.post(srv.url + "/ai/v1/generate", json={**base, "repetition_penalty": -1}),
                    400, "repetition_penalty")


def test_generate_batch_example_body(srv):
    item = {**made_real(GENERATE, "tiny"), "stream": True, "max_tokens": 8}
    r = httpx.post(srv.url + "/ai/v1/generate/batch", json={"mode": "sync", "requests": [
        {"custom_id": "string", "body": item}]}, timeout=120)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["summary"] == {"total": 1, "succeeded": 1, "failed": 0}, d
    assert d["data"][0]["custom_id"] == "string" and d["data"][0]["response"]["usage"]["completion_tokens"] == 8


@pytest.mark.parametrize("field,value,served", [
    ("backend", "onnx", "'native'"), ("backend", "metal", "'llama.cpp'"), ("backend", "xla", "'auto'"),
    ("mode", "compiled", "'eager'"), ("compiled_target", "full", "'partitioned'")])
def test_runtime_values_not_served_name_the_served_ones(srv, field, value, served):
    body = {**made_real(GENERATE, "tiny"), "stream": False, "max_tokens": 2, field: value}
    err = assert_envelope("antfly", httpx.post(srv.url + "/ai/v1/generate", json=body, timeout=60), 400, field)
    assert served in err["message"]


@pytest.mark.parametrize("backend", ["auto", "native", "llama.cpp", "llama_cpp"])
def test_backends_that_serve_generators_are_accepted(srv, backend):
    models = httpx.get(srv.url + "/ai/v1/models").json()["backends"]
    assert {"native", "onnx", "metal", "cuda", "xla", "wasm"} <= set(models)  # the spec's map, all named
    assert models["native"] is True and models["xla"] is False
    body = {**made_real(GENERATE, "tiny"), "stream": False, "max_tokens": 2, "backend": backend}
    assert httpx.post(srv.url + "/ai/v1/generate", json=body, timeout=60).status_code == 200


@pytest.mark.parametrize("path", ["/ai/v1/embed", "/ai/v1/embeddings"])
def test_embed_example_body(srv, path):
    r = httpx.post(srv.url + path, json=made_real(EMBED, "tiny-embed"), timeout=60)
    assert r.status_code == 200, r.text
    v = r.json()["data"][0]["embedding"]
    assert len(v) == len(EMB["mean"][0])  # dimensions 0: the model's own size
    unset = {k: v for k, v in made_real(EMBED, "tiny-embed").items() if k != "dimensions"}
    assert httpx.post(srv.url + path, json=unset, timeout=60).json()["data"][0]["embedding"] == v
    neg = httpx.post(srv.url + path, json={**made_real(EMBED, "tiny-embed"), "dimensions": -1}, timeout=60)
    assert_envelope("antfly", neg, 400, "dimensions")


def test_embed_errors_stage_parse(srv):
    r = httpx.post(srv.url + "/ai/v1/embed", json={
        "model": "tiny-embed", "error_policy": "per_item",
        "input": ["rain", {"type": "image_url", "image_url": {"url": "data:image/png;base64"}}, ""]}, timeout=60)
    assert r.status_code == 200, r.text
    errs = {e["index"]: e for e in r.json()["errors"]}
    assert errs[1]["stage"] == "parse" and "malformed data URI" in errs[1]["message"]
    assert errs[2]["stage"] == "validate"


STRICT_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "strict": True, "parameters": {
        "type": "object", "properties": {"location": {"type": "string", "maxLength": 12}},
        "required": ["location"], "additionalProperties": False}}}


@pytest.mark.parametrize("path", ["/ai/v1/chat/completions", "/v1/chat/completions"])
def test_strict_tool_arguments_obey_the_schema_under_auto(srv, path):
    """tools[].function.strict under tool_choice 'auto' (with a JSON response_format, so the
    random fixture reaches both branches): every answer is a JSON object or a call whose
    arguments validate; without strict nothing holds the model to the tool's schema."""
    import jsonschema

    schema = STRICT_WEATHER["function"]["parameters"]
    calls = answers = 0
    for seed, bias in [(0, {}), (1, {}), (2, {}), (0, {"60": -100}), (1, {"60": -100})]:  # 60 "<": no call starts
        r = httpx.post(srv.url + path, timeout=60, json={
            "model": "plain", "messages": [{"role": "user", "content": "Weather in Paris?"}], "seed": seed,
            "temperature": 1.0, "max_tokens": 160, "parallel_tool_calls": False, "tools": [STRICT_WEATHER],
            "tool_choice": "auto", "response_format": {"type": "json_object"}, "logit_bias": {"125": 6, **bias}})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        if choice["finish_reason"] == "tool_calls":
            for c in choice["message"]["tool_calls"]:
                assert c["function"]["name"] == "get_weather"
                jsonschema.validate(json.loads(c["function"]["arguments"]), schema)
            calls += 1
        else:
            assert choice["finish_reason"] == "stop", choice
            assert isinstance(json.loads(choice["message"]["content"]), dict)
            answers += 1
    assert calls >= 1 and answers >= 1, (calls, answers)
    # a raw grammar cannot also hold the call to the schema: a 400 naming the conflict
    bad = httpx.post(srv.url + path, timeout=60, json={
        "model": "plain", "messages": [{"role": "user", "content": "hi"}], "tools": [STRICT_WEATHER],
        "grammar": 'root ::= "x"'})
    assert bad.status_code == 400 and "strict: true" in bad.text


# The other routes' examples, as written (model names made the served fixtures'; the
# elided base64 of the read example and the transcribe example's "string" made real media).
OTHER_EXAMPLES = [
    ("/ai/v1/rerank", {"model": "BAAI/bge-reranker-v2-m3", "query": "machine learning applications",
                       "prompts": ["Introduction to machine learning...", "Deep learning fundamentals..."]}),
    ("/ai/v1/read", {"model": "microsoft/trocr-base-printed", "images": [{"url": "data:image/png;base64,iVBORw0KGgo..."}],
                     "prompt": "What type of document is this?", "max_tokens": 256}),
    ("/ai/v1/transcribe", {"model": "openai/whisper-tiny", "audio": "string", "language": "en"}),
]


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec-other")
    shutil.copytree(FIX / "onnx" / "tiny-bert-rerank", d / "rerankers" / "BAAI" / "bge-reranker-v2-m3")
    shutil.copytree(FIX / "vision" / "trocr-tiny", d / "readers" / "microsoft" / "trocr-base-printed")
    shutil.copytree(FIX / "speech" / "whisper-tiny-random", d / "transcribers" / "openai" / "whisper-tiny")
    with serve(models_dir=str(d), threads=1) as s:
        yield s


@pytest.mark.parametrize("path,body", OTHER_EXAMPLES, ids=[p for p, _ in OTHER_EXAMPLES])
def test_other_example_bodies(other, path, body):
    import base64

    from PIL import Image

    from tests.vision_helpers import data_uri

    b = copy.deepcopy(body)
    if path == "/ai/v1/read":
        b["images"][0]["url"] = data_uri(Image.new("RGB", (64, 24), (255, 255, 255)))
    if path == "/ai/v1/transcribe":
        b["audio"] = base64.b64encode((FIX / "speech" / "clips" / "fox.wav").read_bytes()).decode()
    r = httpx.post(other.url + path, json=b, timeout=120)
    if path == "/ai/v1/read":
        # The example's prompt is a Pix2Struct question sent to TrOCR, "pure OCR" in the spec's
        # own list: refused by name rather than ignored; the example without it is read.
        assert_envelope("antfly", r, 400, "takes no prompt")
        del b["prompt"]
        r = httpx.post(other.url + path, json=b, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out.get("model") == body["model"] or out.get("data") or out.get("text") is not None, out
