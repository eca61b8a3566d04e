"""The Antfly spec's engine controls over real HTTP on the tiny GGUF fixtures (/ai/v1/generate,
/ai/v1/chat/completions, /ai/v1/generate/batch): cache_dtype, prompt_cache, prompt_cache_key,
cache_compaction_ratio, backend/mode/compiled_target, speculation (n-gram and a draft model)
with its response object and /metrics counters, and the -c/--ctx-size serve flag. Every value
inferd cannot honour is a 400 naming the field, never ignored."""

import json
import shutil
from pathlib import Path

import httpx
import pytest

from inferd.cli import build_parser
from inferd.config import load_settings
from inferd.service.loading import runtime_options
from tests.obs_helpers import metric, parse_metrics
from tests.server import serve
from tests.test_http_foundation import assert_envelope

GGUF = Path(__file__).parent / "fixtures" / "gguf"
PASSAGE = " ".join(["hello", "world", "the", "other", "one", "is", "here", "there"][(j * 3) % 8] for j in range(30))


def model(d: Path, name: str, file: str, **manifest) -> None:
    m = d / "generators" / name
    m.mkdir(parents=True)
    shutil.copy(GGUF / file, m / "model.gguf")
    (m / "model_manifest.json").write_text(json.dumps({"n_ctx": 512, **manifest}))


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("controls")
    model(d, "tiny", "tiny-llama.gguf")
    model(d, "tiny-f32", "tiny-llama.gguf", cache_dtype="f32")
    model(d, "tiny-short", "tiny-llama.gguf", n_ctx=64)
    model(d, "tiny-draft", "tiny-llama-draft.gguf")
    model(d, "tiny-other", "tiny-llama-othervocab.gguf")
    model(d, "tiny-ngram", "tiny-llama.gguf", draft_model="ngram", speculative_k=3)
    with serve(models_dir=str(d), parallel=4, threads=1) as s:
        yield s


def gen(s, path="/ai/v1/generate", **body):
    body.setdefault("model", "tiny")
    body.setdefault("messages", [{"role": "user", "content": PASSAGE}])
    body.setdefault("temperature", 0)
    return httpx.post(s.url + path, json=body, timeout=60)


def ok(r):
    assert r.status_code == 200, r.text
    return r.json()


def engine(s, name="tiny"):
    return s.service.registry.loaded[name].model.scheduler


def test_cache_dtype_must_be_the_loaded_models(srv):
    assert ok(gen(srv, cache_dtype="f16", max_tokens=4, ignore_eos=True))["usage"]["completion_tokens"] == 4
    body = assert_envelope("antfly", gen(srv, cache_dtype="q8_0", max_tokens=4), 400, "loaded with a f16 KV cache")
    assert "cache_dtype" in body["message"]
    # a model whose manifest asks for f32 really runs an f32 cache, and refuses f16 (the tiny model's 16-wide heads do not fit q8_0/q4_0 blocks of 32)
    q8 = ok(gen(srv, model="tiny-f32", cache_dtype="f32", max_tokens=6, ignore_eos=True))
    assert q8["usage"]["completion_tokens"] == 6
    assert srv.service.registry.loaded["tiny-f32"].model.runtime.cache_dtype == "f32"
    assert_envelope("antfly", gen(srv, model="tiny-f32", cache_dtype="f16", max_tokens=4), 400, "loaded with a f32")
    body = assert_envelope("antfly", gen(srv, cache_dtype="int4", max_tokens=4), 400, "cache_dtype")
    assert "'q4_0'" in body["message"] and "'bf16'" in body["message"]


@pytest.mark.parametrize("field,good,bad", [("backend", "auto", "tensorrt"), ("mode", "eager", "compiled"),
                                            ("compiled_target", "partitioned", "full"),
                                            ("speculation_policy", "off", "sometimes"),
                                            ("speculation_calibration", "online", "offline")])
def test_runtime_selection_accepts_only_what_inferd_does(srv, field, good, bad):
    ok(gen(srv, max_tokens=2, **{field: good}))
    body = assert_envelope("antfly", gen(srv, max_tokens=2, **{field: bad}), 400, field)
    assert repr(good) in body["message"]  # the accepted values are named


def test_prompt_cache_false_reuses_nothing_and_leaves_nothing(srv):
    msgs = [{"role": "user", "content": "private: " + PASSAGE}]  # shares no prefix with other tests' prompts
    a = ok(gen(srv, messages=msgs, max_tokens=3, prompt_cache=False))
    b = ok(gen(srv, messages=msgs, max_tokens=3, prompt_cache=False))
    assert a["usage"]["cached_prompt_tokens"] == b["usage"]["cached_prompt_tokens"] == 0
    # nothing was left behind: only the chat template's head is reused, as for any new content
    head = ok(gen(srv, messages=[{"role": "user", "content": "other: " + PASSAGE}], max_tokens=3))
    c = ok(gen(srv, messages=msgs, max_tokens=3))
    assert c["usage"]["cached_prompt_tokens"] == head["usage"]["cached_prompt_tokens"] < 10
    d = ok(gen(srv, messages=msgs, max_tokens=3))  # the default keeps it
    assert d["usage"]["cached_prompt_tokens"] == d["usage"]["prompt_tokens"] - 1
    assert a["choices"][0]["message"] == d["choices"][0]["message"]


def test_prompt_cache_key_goes_back_to_its_slot(srv):
    ok(gen(srv, messages=[{"role": "user", "content": "one is here"}], max_tokens=2, prompt_cache_key="alice"))
    eng = engine(srv)
    home = [s.id for s in eng.slots if s.key == "alice"]
    assert len(home) == 1
    for i in range(3):
        ok(gen(srv, messages=[{"role": "user", "content": f"world world world {i} the other"}], max_tokens=2,
               prompt_cache_key=f"bob{i}"))
    # other keys went to other slots (prefix matching alone would have reused alice's: the chat
    # template's head is common to all), and alice's slot kept its key
    assert eng.slots[home[0]].key == "alice" and {s.key for s in eng.slots} >= {"bob0", "bob1", "bob2"}
    # another slot holds the longer prefix of this prompt (prefix matching alone would go there);
    # the key takes it to alice's slot, which borrows that prefix
    r = ok(gen(srv, messages=[{"role": "user", "content": "world world world"}], max_tokens=2,
               prompt_cache_key="alice"))
    tiny = srv.service.registry.loaded["tiny"].model.runtime
    assert "world world world" in tiny.detokenize(eng.slots[home[0]].cache)
    assert r["usage"]["cached_prompt_tokens"] > 8


def test_cache_compaction_ratio_shifts_the_context_and_goes_on(srv):
    short = dict(model="tiny-short", messages=[{"role": "user", "content": "hello world the other"}],
                 ignore_eos=True)
    assert_envelope("antfly", gen(srv, max_tokens=100, **short), 400, "context window of 64")
    before = parse_metrics(httpx.get(srv.url + "/metrics").text)
    r = ok(gen(srv, max_tokens=100, cache_compaction_ratio=0.5, **short))
    assert r["usage"]["completion_tokens"] == 100 and r["choices"][0]["finish_reason"] == "length"
    after = parse_metrics(httpx.get(srv.url + "/metrics").text)
    k = ("inferd_context_shifts_total", frozenset({("model", "tiny-short")}))
    assert after[k] - before.get(k, 0) >= 2  # ~2 shifts for 100 tokens past a 64-token window
    # the shifted sequence leaves no prefix behind (its cells were computed with dropped tokens)
    again = ok(gen(srv, max_tokens=2, **short))
    assert again["usage"]["cached_prompt_tokens"] == 0
    assert_envelope("antfly", gen(srv, max_tokens=2, cache_compaction_ratio=1.0, **short), 400,
                    "cache_compaction_ratio")


@pytest.mark.parametrize("draft", ["ngram", "tiny-draft"])
def test_speculation_same_output_reported_and_counted(srv, draft):
    plain = ok(gen(srv, max_tokens=40, ignore_eos=True, prompt_cache=False, speculation_policy="off"))
    assert plain["speculation"] == {**plain["speculation"], "decision": "disabled",
                                    "disabled_reason": "policy_off", "policy": "off"}
    m0 = parse_metrics(httpx.get(srv.url + "/metrics").text)
    spec = ok(gen(srv, max_tokens=40, ignore_eos=True, prompt_cache=False, draft_model=draft,
                  speculation_policy="on", speculative_k=4, path="/ai/v1/chat/completions"))
    assert spec["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    sp = spec["speculation"]
    assert sp["policy"] == "on" and sp["calibration"] == "none" and sp["decision"] == "enabled"
    assert sp["disabled_reason"] is None and sp["draft_model"] == draft
    assert sp["drafted_tokens"] > 0 and 0 < sp["accepted_tokens"] <= sp["drafted_tokens"]
    m1 = parse_metrics(httpx.get(srv.url + "/metrics").text)
    drafted = metric(m1, "inferd_speculative_drafted_tokens_total", model="tiny") - m0.get(
        ("inferd_speculative_drafted_tokens_total", frozenset({("model", "tiny")})), 0)
    accepted = metric(m1, "inferd_speculative_accepted_tokens_total", model="tiny") - m0.get(
        ("inferd_speculative_accepted_tokens_total", frozenset({("model", "tiny")})), 0)
    assert (drafted, accepted) == (sp["drafted_tokens"], sp["accepted_tokens"])


def test_streamed_speculation_is_on_the_final_chunk(srv):
    body = {"model": "tiny", "messages": [{"role": "user", "content": PASSAGE}], "temperature": 0, "max_tokens": 24,
            "ignore_eos": True, "stream": True, "draft_model": "ngram", "speculation_policy": "on"}
    with httpx.stream("POST", srv.url + "/ai/v1/generate", json=body, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    final = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(final) == 1 and final[0]["speculation"]["decision"] == "enabled"
    assert final[0]["speculation"]["drafted_tokens"] > 0
    assert not any("speculation" in c for c in chunks if c is not final[0])


def test_manifest_draft_model_speculates_under_auto(srv):
    plain = ok(gen(srv, max_tokens=32, ignore_eos=True, prompt_cache=False))
    r = ok(gen(srv, model="tiny-ngram", max_tokens=32, ignore_eos=True, prompt_cache=False))
    sp = r["speculation"]
    assert (sp["policy"], sp["decision"], sp["draft_model"], sp["speculative_k"]) == ("auto", "enabled", "ngram", 3)
    assert sp["drafted_tokens"] > 0
    assert r["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]


def test_speculation_refusals_name_the_field(srv):
    assert_envelope("antfly", gen(srv, max_tokens=2, draft_model="tiny-other"), 400, "vocabulary")
    assert_envelope("antfly", gen(srv, max_tokens=2, draft_model="nope"), 400, "draft_model: no served generator")
    assert_envelope("antfly", gen(srv, max_tokens=2, draft_model="tiny"), 400, "target model itself")
    assert_envelope("antfly", gen(srv, max_tokens=2, speculation_policy="on"), 400, "speculation_policy")
    assert_envelope("antfly", gen(srv, max_tokens=2, speculative_k=0), 400, "speculative_k")
    off = ok(gen(srv, max_tokens=2, draft_model="ngram", speculation_policy="off"))
    assert off["speculation"]["decision"] == "disabled" and off["speculation"]["disabled_reason"] == "policy_off"


def test_batch_items_carry_engine_controls(srv):
    body = {"mode": "sync", "requests": [
        {"custom_id": "a", "body": {"model": "tiny", "messages": [{"role": "user", "content": PASSAGE}],
                                    "max_tokens": 40, "temperature": 0, "ignore_eos": True, "draft_model": "ngram",
                                    "speculation_policy": "on"}},
        {"custom_id": "b", "body": {"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                    "cache_dtype": "q4_0"}}]}
    r = ok(httpx.post(srv.url + "/ai/v1/generate/batch", json=body, timeout=60))
    a, b = r["data"]
    assert a["response"]["speculation"]["decision"] == "enabled"
    assert a["response"]["speculation"]["drafted_tokens"] > 0
    assert b["response"] is None and "cache_dtype" in b["error"]["message"]


def test_ctx_size_cache_dtype_and_gpu_layer_flags(tmp_path):
    ns = build_parser().parse_args(["serve", "-c", "48", "--cache-dtype", "bf16", "--n-gpu-layers", "0"])
    opts = runtime_options(load_settings({k: getattr(ns, k) for k in ("ctx_size", "cache_dtype", "n_gpu_layers")}))
    assert (opts.n_ctx, opts.cache_dtype, opts.n_gpu_layers) == (48, "bf16", 0)
    d = tmp_path / "m"
    model(d, "tiny", "tiny-llama.gguf")
    with serve(models_dir=str(d), parallel=2, threads=1, ctx_size=48, cache_dtype="bf16") as s:
        assert_envelope("antfly", gen(s, max_tokens=60), 400, "context window of 48")
        r = ok(gen(s, messages=[{"role": "user", "content": "hi"}], max_tokens=8, ignore_eos=True,
                   cache_dtype="bf16"))
        assert r["usage"]["completion_tokens"] == 8
        be = s.service.registry.loaded["tiny"].model.runtime
        assert (be.n_ctx_seq, be.cache_dtype) == (48, "bf16")


def test_host_ram_prompt_cache_restores_an_evicted_conversation():
    """--cache-ram: two slots, three conversations. The first one's slot is overwritten, its KV
    state goes to host memory, and its next turn gets it back (prefilling only the new part),
    with the tokens a fresh decode gives."""
    from inferd.registry.discovery import make_spec
    from inferd.models import ModelKind
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.loading import LOADERS
    from tests.test_gen_engine import fresh, go

    spec = make_spec("tiny", GGUF / "tiny-llama.gguf", "cli", ModelKind.GENERATOR)
    g = LOADERS[(ModelKind.GENERATOR, "gguf")](spec, RuntimeOptions(threads=1, parallel=2, cache_ram=32 << 20))
    try:
        tok = g.runtime.tokenize
        a = tok("the other one is here " * 12)
        first = go(g, a, 8, ignore_eos=True).wait()
        for text in ["world hello there " * 10, "in at is " * 12]:  # evict it
            go(g, tok(text), 4, ignore_eos=True).wait()
        assert not any(s.cache[:len(a)] == a for s in g.scheduler.slots)
        assert len(g.scheduler.host_cache) >= 1
        turn2 = a + first.tokens + tok(" hello world", add_special=False)
        back = go(g, turn2, 12, ignore_eos=True).wait()
        assert back.last.usage.cached_prompt_tokens == len(a) + len(first.tokens) - 1
        assert g.scheduler.stats.host_cache_restored_tokens == len(a) + len(first.tokens) - 1
        fresh(g)  # drops slots and host cache alike
        assert len(g.scheduler.host_cache) == 0
        plain = go(g, turn2, 12, ignore_eos=True).wait()
        assert plain.last.usage.cached_prompt_tokens == 0
        assert back.tokens == plain.tokens
    finally:
        g.close()
