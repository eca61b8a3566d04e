"""POST /ai/v1/rewrite over real HTTP on the tiny T5/BART fixtures: every request field, the
Antfly error envelope, per-item errors, truncation, the catalog, batching of concurrent
requests (fewer encoder passes than requests) and cancellation of a client that left."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.server import serve

S2S = Path(__file__).parent / "fixtures" / "seq2seq"
ONNX = Path(__file__).parent / "fixtures" / "onnx"
T5 = json.loads((S2S / "reference-t5.json").read_text())
BART = json.loads((S2S / "reference-bart.json").read_text())
LONG = "the quick brown fox jumps over the lazy dog " * 40


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    for kind in ("rewriters", "embedders"):
        (d / kind).mkdir()
    for name in ("t5-antfly", "t5-merged", "bart-optimum", "t5-ct2"):
        os.symlink(S2S / f"tiny-{name}", d / "rewriters" / name)
    broken = d / "rewriters" / "half-export"
    broken.mkdir()
    for f in ("encoder.onnx", "tokenizer.json", "config.json"):
        shutil.copy(S2S / "tiny-t5-antfly" / f, broken / f)
    os.symlink(ONNX / "tiny-bert-embed", d / "embedders" / "tiny-embed")
    with serve(models_dir=str(d), threads=1) as s:
        yield s


def post(srv, body, timeout=60):
    return httpx.post(srv.url + "/ai/v1/rewrite", json=body, timeout=timeout)


def handle(srv, name):
    return srv.service.registry.loaded[name].model


def wait_for(cond, timeout=5.0):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def slow_steps(h, seconds):
    """Make each decoder step of a loaded ONNX rewriter take at least `seconds` (the real
    step still runs), so that concurrency in the tests does not depend on machine speed."""
    backend = h.scheduler.backend
    real = backend.step

    def slow(tokens, state):
        time.sleep(seconds)
        return real(tokens, state)

    backend.step = slow
    return lambda: setattr(backend, "step", real)


def assert_antfly_error(r, status, code, match=None):
    assert r.status_code == status, r.text
    j = r.json()
    assert j["error"] == code and isinstance(j["message"], str)
    if match:
        assert match in j["message"], j["message"]


# ---- catalog -------------------------------------------------------------------------------------
def test_rewriters_listed_with_their_architecture(srv):
    m = httpx.get(srv.url + "/ai/v1/models").json()
    rw = m["rewriters"]
    assert rw["t5-antfly"]["architecture"] == "T5ForConditionalGeneration"
    assert rw["bart-optimum"]["architecture"] == "BartForConditionalGeneration"
    assert rw["t5-ct2"]["architecture"] == "T5ForConditionalGeneration"
    assert rw["t5-ct2"]["format"] == "ctranslate2" and rw["t5-merged"]["format"] == "onnx"
    assert "tiny-embed" not in rw and "tiny-embed" in m["embedders"]
    assert {"id": "t5-antfly", "type": "rewriter"}.items() <= next(d for d in m["data"] if d["id"] == "t5-antfly").items()


# ---- fields --------------------------------------------------------------------------------------
def test_defaults_are_the_models_generation_config(srv):
    """No options: num_beams and max_length from generation_config.json (greedy, 16 for T5)."""
    r = post(srv, {"model": "t5-antfly", "inputs": T5["inputs"]})
    assert r.status_code == 200
    assert [d["texts"] for d in r.json()["data"]] == T5["cases"]["greedy"]["texts"]


def test_model_may_be_omitted_only_when_one_rewriter_is_served(srv):
    assert_antfly_error(post(srv, {"inputs": ["x"]}), 400, "INVALID_REQUEST", "'model' is required")


def test_max_tokens_caps_the_generated_tokens(srv):
    for n in (1, 3):
        r = post(srv, {"model": "t5-merged", "inputs": [T5["inputs"][3]], "max_tokens": n})
        assert r.json()["usage"]["completion_tokens"] == n
    assert post(srv, {"model": "t5-merged", "inputs": [T5["inputs"][3]], "max_tokens": 5}).json()["data"][0]["texts"] \
        == T5["cases"]["greedy_max5"]["texts"][3]


def test_num_beams_and_num_return_sequences(srv):
    r = post(srv, {"model": "bart-optimum", "inputs": BART["inputs"], "num_beams": 4, "num_return_sequences": 2})
    assert [d["texts"] for d in r.json()["data"]] == BART["cases"]["beam4"]["texts"]
    one = post(srv, {"model": "bart-optimum", "inputs": BART["inputs"], "num_beams": 4}).json()
    assert [d["texts"] for d in one["data"]] == [t[:1] for t in BART["cases"]["beam4"]["texts"]]


def test_sampling_same_seed_same_output(srv):
    for model in ("t5-antfly", "t5-ct2"):
        body = {"model": model, "inputs": T5["inputs"], "temperature": 1.5, "seed": 7}
        a, b = post(srv, body).json(), post(srv, body).json()
        assert a["data"] == b["data"]
        outs = {json.dumps(post(srv, {**body, "seed": s}).json()["data"]) for s in range(6)}
        assert len(outs) > 1  # the seed matters: sampling really samples
        greedy = [d["texts"] for d in post(srv, {**body, "temperature": 0}).json()["data"]]
        assert json.dumps(a["data"]) != json.dumps(greedy)


def test_top_p_that_keeps_one_token_is_greedy(srv):
    r = post(srv, {"model": "t5-antfly", "inputs": T5["inputs"], "temperature": 1.0, "top_p": 1e-6, "seed": 3})
    assert [d["texts"] for d in r.json()["data"]] == T5["cases"]["greedy"]["texts"]


@pytest.mark.parametrize("body,param", [
    ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences"),
    ({"num_return_sequences": 2}, "num_return_sequences"),       # greedy returns one
    ({"num_beams": 0}, "num_beams"),
    ({"num_beams": 99}, "num_beams"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 100_000}, "max_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"seed": -1}, "seed"),
    ({"num_beams": 3, "temperature": 0.7}, "num_beams"),          # beam sampling is refused
    ({"num_beam": 3}, "num_beam"),                                # a misspelt field is not ignored
    ({"error_policy": "sometimes"}, "error_policy"),
    ({"truncate": "maybe"}, "truncate"),
])
def test_bad_options_are_400(srv, body, param):
    r = post(srv, {"model": "t5-antfly", "inputs": ["hello"], **body})
    assert_antfly_error(r, 400, "INVALID_REQUEST", param)


def test_inputs_empty_too_many_or_not_strings(srv):
    assert_antfly_error(post(srv, {"model": "t5-antfly", "inputs": []}), 400, "INVALID_REQUEST", "must not be empty")
    assert_antfly_error(post(srv, {"model": "t5-antfly", "inputs": ["a"] * 2049}), 413, "PAYLOAD_TOO_LARGE",
                        "--max-batch-inputs")  # the same limit as embeddings, rerank and extract
    assert_antfly_error(post(srv, {"model": "t5-antfly", "inputs": [1, 2]}), 400, "INVALID_REQUEST")
    assert_antfly_error(post(srv, {"model": "t5-antfly"}), 400, "INVALID_REQUEST", "'inputs' is required")
    assert_antfly_error(post(srv, {"model": "t5-antfly", "inputs": ["ok", "  "]}), 400, "INVALID_REQUEST",
                        "inputs[1] is empty")


def test_unknown_model_wrong_kind_and_broken_folder(srv):
    assert_antfly_error(post(srv, {"model": "ghost", "inputs": ["x"]}), 404, "MODEL_NOT_FOUND")
    assert_antfly_error(post(srv, {"model": "tiny-embed", "inputs": ["x"]}), 400, "MODEL_NOT_SUPPORTED")
    r = post(srv, {"model": "half-export", "inputs": ["x"]})
    assert_antfly_error(r, 500, "MODEL_LOAD_FAILED", "decoder-init.onnx")
    assert r.json()["retryable"] is True


# ---- truncation and per-item errors ---------------------------------------------------------------
def test_long_input_is_truncated_and_flagged(srv):
    r = post(srv, {"model": "t5-antfly", "inputs": [LONG, T5["inputs"][1]]}).json()
    assert r["data"][0]["truncated"] is True and "truncated" not in r["data"][1]
    assert r["usage"]["prompt_tokens"] == 48 + T5["input_tokens"][1]  # the tokenizer's limit
    assert r["data"][1]["texts"] == T5["cases"]["greedy"]["texts"][1]
    r = post(srv, {"model": "t5-antfly", "inputs": [T5["inputs"][1], LONG], "truncate": False})
    assert_antfly_error(r, 400, "INVALID_REQUEST", "inputs[1] is longer than the model's limit of 48 tokens")


def test_per_item_errors(srv):
    body = {"model": "t5-antfly", "inputs": ["", T5["inputs"][0], LONG, T5["inputs"][2]], "truncate": False,
            "error_policy": "per_item"}
    r = post(srv, body)
    assert r.status_code == 200
    j = r.json()
    assert [d["index"] for d in j["data"]] == [1, 3]
    assert [d["texts"] for d in j["data"]] == [T5["cases"]["greedy"]["texts"][i] for i in (0, 2)]
    errs = {e["index"]: e for e in j["errors"]}
    assert set(errs) == {0, 2}
    assert errs[0]["code"] == "INVALID_REQUEST" and "empty" in errs[0]["message"] and errs[0]["status"] == 400
    assert errs[2]["stage"] == "validate" and "limit of 48" in errs[2]["message"]
    assert j["summary"] == {"total": 4, "succeeded": 2, "failed": 2}
    assert j["usage"]["prompt_tokens"] == T5["input_tokens"][0] + T5["input_tokens"][2]
    # options stay whole-request errors under per_item
    assert_antfly_error(post(srv, {**body, "num_beams": 0}), 400, "INVALID_REQUEST")


def test_lmqg_style_prompt_passes_through(srv):
    """`generate question: <hl> answer <hl> context`: <hl> is one special token of the tokenizer."""
    h = srv.call(_load(srv, "t5-antfly"))
    enc = h.runtime.prepare([T5["inputs"][0]])[0]
    hl = h.runtime.tokenizer.tok.token_to_id("<hl>")
    assert list(enc.ids).count(hl) == 2
    r = post(srv, {"model": "t5-antfly", "inputs": [T5["inputs"][0]]}).json()
    assert r["data"][0]["texts"] == T5["cases"]["greedy"]["texts"][0]


async def _load(srv, name):
    async with srv.service.registry.use(name) as h:
        return h


# ---- batching and cancellation --------------------------------------------------------------------
def test_inputs_of_one_request_share_one_encoder_pass(srv):
    post(srv, {"model": "t5-merged", "inputs": ["warm up"]})
    st = handle(srv, "t5-merged").stats
    before = st.encoder_passes, st.cohorts
    r = post(srv, {"model": "t5-merged", "inputs": T5["inputs"], "num_beams": 4, "num_return_sequences": 2})
    assert r.status_code == 200
    assert (st.encoder_passes, st.cohorts) == (before[0] + 1, before[1] + 1)


def test_concurrent_requests_are_batched(srv):
    post(srv, {"model": "bart-optimum", "inputs": ["warm up"]})
    h = handle(srv, "bart-optimum")
    undo = slow_steps(h, 0.01)
    n = 8
    try:
        before = h.stats.encoder_passes

        async def many():
            async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
                return await asyncio.gather(*(c.post("/ai/v1/rewrite", json={
                    "model": "bart-optimum", "inputs": [BART["inputs"][i % 4]], "num_beams": 4,
                    "num_return_sequences": 2}) for i in range(n)))

        rs = asyncio.run(many())
    finally:
        undo()
    assert all(r.status_code == 200 for r in rs)
    passes = h.stats.encoder_passes - before
    assert passes < n, passes
    for i, r in enumerate(rs):  # batching changes nothing in the answers
        assert r.json()["data"][0]["texts"] == BART["cases"]["beam4"]["texts"][i % 4]


def test_ct2_requests_are_batched(srv):
    post(srv, {"model": "t5-ct2", "inputs": ["warm up"]})
    h = handle(srv, "t5-ct2")
    before = h.stats.batches
    r = post(srv, {"model": "t5-ct2", "inputs": T5["inputs"]})
    assert [d["texts"] for d in r.json()["data"]] == T5["cases"]["greedy"]["texts"]
    assert h.stats.batches == before + 1


def test_a_client_that_leaves_is_dropped_at_the_next_step(srv):
    post(srv, {"model": "t5-antfly", "inputs": ["warm up"]})
    h = handle(srv, "t5-antfly")
    undo = slow_steps(h, 0.05)
    try:
        before = h.stats.cancelled
        # 16 beams x 1024 tokens for 8 inputs would decode for minutes at this pace
        body = {"model": "t5-antfly", "inputs": [LONG] * 8, "num_beams": 16, "max_tokens": 1024}
        with pytest.raises(httpx.ReadTimeout):
            post(srv, body, timeout=0.5)
        wait_for(lambda: h.stats.cancelled >= before + 8, 3)
        wait_for(lambda: not h.scheduler.active, 3)
        steps = h.stats.decoder_steps
        time.sleep(0.2)
        assert h.stats.decoder_steps == steps  # nothing runs for nobody
        wait_for(lambda: srv.service.admission.in_flight == 0, 3)
    finally:
        undo()
    r = post(srv, {"model": "t5-antfly", "inputs": T5["inputs"]})
    assert [d["texts"] for d in r.json()["data"]] == T5["cases"]["greedy"]["texts"]


def test_a_request_arriving_mid_batch_does_not_wait_for_it(srv):
    """A long batch is decoding; a short request starts in its own cohort and finishes first."""
    post(srv, {"model": "t5-merged", "inputs": ["warm up"]})
    h = handle(srv, "t5-merged")
    undo = slow_steps(h, 0.02)
    done = {}
    try:
        def long():
            done["long"] = post(srv, {"model": "t5-merged", "inputs": [LONG] * 4, "num_beams": 8, "max_tokens": 60})
            done["long_t"] = time.time()

        t = threading.Thread(target=long)
        t.start()
        wait_for(lambda: h.scheduler.active, 3)
        short = post(srv, {"model": "t5-merged", "inputs": [T5["inputs"][1]], "max_tokens": 3})
        short_t = time.time()
        assert short.status_code == 200 and "long" not in done
        t.join(60)
    finally:
        undo()
    assert done["long"].status_code == 200 and done["long_t"] > short_t


def test_a_failing_pass_fails_its_requests_only(srv):
    post(srv, {"model": "t5-antfly", "inputs": ["warm up"]})
    h = handle(srv, "t5-antfly")
    backend = h.scheduler.backend
    real = backend.step

    def broken(tokens, state):
        raise RuntimeError("the accelerator caught fire")

    backend.step = broken
    try:
        r = post(srv, {"model": "t5-antfly", "inputs": T5["inputs"][2:], "max_tokens": 8})
        assert_antfly_error(r, 500, "INFERENCE_FAILED", "caught fire")
        per = post(srv, {"model": "t5-antfly", "inputs": T5["inputs"][2:], "max_tokens": 8, "error_policy": "per_item"})
        assert per.status_code == 200 and per.json()["summary"]["failed"] == 2
        assert {e["code"] for e in per.json()["errors"]} == {"INFERENCE_FAILED"}
    finally:
        backend.step = real
    r = post(srv, {"model": "t5-antfly", "inputs": T5["inputs"]})
    assert [d["texts"] for d in r.json()["data"]] == T5["cases"]["greedy"]["texts"]


def test_max_tokens_stops_at_a_learned_position_table(srv):
    """BART's decoder has 64 positions: 63 new tokens at most (T5's relative ones have no end)."""
    assert_antfly_error(post(srv, {"model": "bart-optimum", "inputs": ["x"], "max_tokens": 64}), 400,
                        "INVALID_REQUEST", "between 1 and 63")
    r = post(srv, {"model": "bart-optimum", "inputs": BART["inputs"], "max_tokens": 63, "num_beams": 4})
    assert r.status_code == 200
    assert post(srv, {"model": "t5-antfly", "inputs": ["x"], "max_tokens": 200}).status_code == 200


def test_a_large_request_is_split_into_cohorts_within_the_memory_budget(srv):
    """8 long inputs x 16 beams (8 x 16 x 48 = 6,144 row-tokens) with a 8,192 budget per cohort: all
    answered, in more than one cohort when the budget is small."""
    post(srv, {"model": "t5-merged", "inputs": ["warm up"]})
    h = handle(srv, "t5-merged")
    sched = h.scheduler
    old = sched.max_tokens
    sched.max_tokens = 1000  # 20 rows of 48 source tokens per cohort
    try:
        before = h.stats.cohorts
        r = post(srv, {"model": "t5-merged", "inputs": [LONG] * 8, "num_beams": 16, "max_tokens": 4})
        assert r.status_code == 200 and len(r.json()["data"]) == 8
        assert h.stats.cohorts - before == 8  # 16 rows x 48 each: one input per cohort
        assert len({json.dumps(d["texts"]) for d in r.json()["data"]}) == 1  # same input, same answer
    finally:
        sched.max_tokens = old


def test_ct2_decoding_stops_when_the_client_leaves(srv):
    post(srv, {"model": "t5-ct2", "inputs": ["warm up"]})
    h = handle(srv, "t5-ct2")
    backend = h.runtime.backend
    before, dropped = backend.stopped, h.stats.cancelled
    # T5 input 3 never emits </s>: 128 x 1024 greedy tokens would take seconds
    body = {"model": "t5-ct2", "inputs": [T5["inputs"][3]] * 128, "max_tokens": 1024}
    t0 = time.time()
    with pytest.raises(httpx.ReadTimeout):
        post(srv, body, timeout=0.3)
    wait_for(lambda: srv.service.admission.in_flight == 0, 10)
    # every input was stopped mid-decoding, or dropped before its batch ran if it had not started
    wait_for(lambda: (backend.stopped - before) + (h.stats.cancelled - dropped) == 128, 10)
    wait_for(lambda: not h.scheduler.busy, 10)
    assert time.time() - t0 < 10


def test_requests_with_different_options_share_a_cohort_and_stay_exact(srv):
    """Greedy, beam-4 and max_tokens-5 requests waiting together are encoded in one pass and
    decoded in one cohort, each input with its own search: every answer is still the reference."""
    post(srv, {"model": "bart-optimum", "inputs": ["warm up"]})
    h = handle(srv, "bart-optimum")
    undo = slow_steps(h, 0.02)
    cases = [("greedy", {}), ("beam4", {"num_beams": 4, "num_return_sequences": 2}),
             ("greedy_max5", {"max_tokens": 5}), ("beam3_max6", {"num_beams": 3, "num_return_sequences": 3,
                                                                "max_tokens": 6})]
    try:
        async def scenario():
            async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
                started = h.stats.cohorts
                busy = asyncio.create_task(c.post("/ai/v1/rewrite", json={
                    "model": "bart-optimum", "inputs": ["keep the worker busy"], "max_tokens": 20}))
                # the busy cohort has started (its encoder pass and first step both counted), so the
                # counts below are the four requests' alone
                while not h.scheduler.active or h.stats.cohorts == started:
                    await asyncio.sleep(0.005)
                passes, cohorts = h.stats.encoder_passes, h.stats.cohorts
                rs = await asyncio.gather(*(c.post("/ai/v1/rewrite", json={
                    "model": "bart-optimum", "inputs": BART["inputs"], "temperature": 0, **kw}) for _, kw in cases))
                await busy
                return rs, h.stats.encoder_passes - passes, h.stats.cohorts - cohorts

        rs, passes, cohorts = asyncio.run(scenario())
    finally:
        undo()
    for (case, _), r in zip(cases, rs):
        assert [d["texts"] for d in r.json()["data"]] == BART["cases"][case]["texts"], case
    assert passes == cohorts and passes < len(cases)  # the four requests did not each get a pass
