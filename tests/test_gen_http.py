"""Generation over real HTTP on the tiny GGUF fixture, through the official `openai` and
`ollama` clients and plain httpx: chat, completions, streams, sampling, batching,
cancellation, errors in each API family's envelope."""

import asyncio
import json
import threading
import time

import httpx
import ollama
import openai
import pytest

from tests.server import serve
from tests.test_http_foundation import assert_envelope

TINY = "tests/fixtures/gguf/tiny-llama.gguf"
HI = [{"role": "user", "content": "hello world"}]


@pytest.fixture(scope="module")
def srv():
    with serve(models=[f"tiny={TINY}"], parallel=8, threads=1) as s:
        yield s


@pytest.fixture
def oai(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def runtime(s, name="tiny"):
    """The loaded model's handle: .scheduler (its engine) and .runtime (llama.cpp)."""
    return s.service.registry.loaded[name].model


def wait_for(cond, timeout=5.0):
    t = time.time()
    while not cond():
        assert time.time() - t < timeout, "condition not reached"
        time.sleep(0.01)


def slow_decode(handle, seconds):
    """Slow every decode step (the tiny model finishes in milliseconds otherwise)."""
    rt = handle.runtime
    real = rt.decode

    def decode(entries):
        threading.Event().wait(seconds)
        return real(entries)

    rt.decode = decode
    return lambda: rt.__dict__.pop("decode", None)


# ---- the official clients ------------------------------------------------------------------
def test_openai_client_chat_stream_and_completions(oai):
    r = oai.chat.completions.create(model="tiny", messages=HI, max_tokens=12, temperature=0)
    text = r.choices[0].message.content
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 12 and text
    assert r.usage.prompt_tokens > 5 and r.usage.total_tokens == r.usage.prompt_tokens + 12

    chunks = list(oai.chat.completions.create(model="tiny", messages=HI, max_tokens=12, temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text  # same as non-streamed
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0  # same prompt as before: reused
    extra = [c.model_extra for c in chunks if c.choices and c.choices[0].delta.content]
    assert extra[0]["ttft"] > 0 and "ttft" not in extra[1] and extra[-1]["generated_tokens"] >= 10

    c = oai.completions.create(model="tiny", prompt="hello world", max_tokens=6, temperature=0)
    assert c.object == "text_completion" and c.choices[0].finish_reason == "length" and c.usage.completion_tokens == 6
    joined = oai.completions.create(model="tiny", prompt=["hello", "world"], max_tokens=1, temperature=0)
    ids = httpx.post(oai.base_url.join("/tokenize").__str__(), json={"content": "hello\nworld", "add_special": True}).json()
    assert joined.usage.prompt_tokens == len(ids["tokens"])  # strings joined by newlines
    by_ids = oai.completions.create(model="tiny", prompt=ids["tokens"], max_tokens=6, temperature=0)
    by_text = oai.completions.create(model="tiny", prompt="hello\nworld", max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text


def test_openai_client_errors(oai):
    with pytest.raises(openai.NotFoundError, match="'ghost' not found"):
        oai.chat.completions.create(model="ghost", messages=HI)
    with pytest.raises(openai.BadRequestError, match="context window of 256 tokens") as e:
        oai.chat.completions.create(model="tiny", messages=HI, max_tokens=1000)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError, match="prompt has"):
        oai.completions.create(model="tiny", prompt="hello world " * 300)
    with pytest.raises(openai.BadRequestError, match="messages"):
        oai.chat.completions.create(model="tiny", messages=[])
    with pytest.raises(openai.BadRequestError, match="temperature"):
        oai.chat.completions.create(model="tiny", messages=HI, temperature=7)
    with pytest.raises(openai.BadRequestError, match="out of range"):
        oai.completions.create(model="tiny", prompt=[1, 99999])


def test_ollama_client_chat_generate_and_stream(srv):
    cl = ollama.Client(host=srv.url)
    r = cl.chat(model="tiny", messages=HI, options={"num_predict": 8, "temperature": 0})
    assert r.done and r.done_reason == "length" and r.eval_count == 8 and r.message.role == "assistant"
    assert r.prompt_eval_count > 5 and r.total_duration > 0 and r.eval_duration > 0
    parts = list(cl.chat(model="tiny", messages=HI, options={"num_predict": 8, "temperature": 0}, stream=True))
    assert "".join(p.message.content for p in parts) == r.message.content
    assert parts[-1].done and parts[-1].done_reason == "length" and not any(p.done for p in parts[:-1])
    g = cl.generate(model="tiny", prompt="hello world", raw=True, options={"num_predict": 5, "temperature": 0})
    assert g.done_reason == "length" and g.eval_count == 5 and len(g.context) == g.prompt_eval_count + 5
    again = cl.generate(model="tiny", prompt="", context=g.context, raw=True,
                        options={"num_predict": 3, "temperature": 0})
    assert again.prompt_eval_count == len(g.context)  # `context` continues the conversation
    loaded = cl.generate(model="tiny")  # Ollama: an empty request just loads the model
    assert loaded.done_reason == "load"
    with pytest.raises(ollama.ResponseError) as e:
        cl.chat(model="ghost", messages=HI)
    assert e.value.status_code == 404


def test_ollama_defaults_stream_ndjson(srv):
    with httpx.stream("POST", srv.url + "/api/generate", json={"model": "tiny", "prompt": "hi",
                                                               "options": {"num_predict": 3}}) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in r.iter_lines() if x]
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] == 3 and "ttft" in lines[0]


# ---- batching --------------------------------------------------------------------------------
def test_eight_concurrent_greedy_streams_equal_each_alone(srv):
    """F32 decoding is batch-invariant: any difference is a scheduling bug."""
    words = "the other one is here and there hello world".split()
    msgs = [[{"role": "user", "content": " ".join(words[(i + j) % len(words)] for j in range(2 + 3 * i))}]
            for i in range(8)]

    async def one(m):
        client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        async with client:
            stream = await client.chat.completions.create(model="tiny", messages=m, max_tokens=64, temperature=0,
                                                          stream=True, extra_body={"ignore_eos": True})
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def all_at_once():
        return await asyncio.gather(*(one(m) for m in msgs))

    rt = runtime(srv) if "tiny" in srv.service.registry.loaded else None
    alone = []
    for m in msgs:
        if rt is not None:
            rt.scheduler.call_when_idle(lambda: None).result(10)  # no cached prefixes: compute everything
        alone.append(asyncio.run(one(m)))
        rt = runtime(srv)
    # Hold the worker (it also drops cached prefixes) until all 8 requests are queued, so they
    # really decode together: the tiny model would otherwise finish one before the next arrives.
    gate = threading.Event()
    rt.scheduler.call_when_idle(lambda: gate.wait(10))
    threading.Thread(target=lambda: (wait_for(lambda: rt.scheduler.queued == 8, 10), gate.set())).start()
    before = rt.scheduler.batch_sizes[8]
    together = asyncio.run(all_at_once())
    assert together == alone
    assert all(len(t) > 20 for t in together)
    assert rt.scheduler.batch_sizes[8] >= before + 60  # one decode per step for all eight


def test_multi_turn_chat_reuses_the_history(oai):
    first = oai.chat.completions.create(model="tiny", messages=HI, max_tokens=6, temperature=0)
    history = HI + [{"role": "assistant", "content": first.choices[0].message.content},
                    {"role": "user", "content": "the other one"}]
    second = oai.chat.completions.create(model="tiny", messages=history, max_tokens=6, temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    assert second.model_extra["timings"]["cached_prompt_tokens"] == second.usage.prompt_tokens_details.cached_tokens


def test_antfly_generate_and_batch(srv):
    body = {"model": "tiny", "messages": HI, "max_tokens": 5, "temperature": 0}
    r = httpx.post(srv.url + "/ai/v1/generate", json=body).json()
    assert r["object"] == "chat.completion" and r["usage"]["completion_tokens"] == 5
    assert "cached_prompt_tokens" in r["usage"]
    same = httpx.post(srv.url + "/ai/v1/chat/completions", json=body).json()
    assert same["choices"][0]["message"]["content"] == r["choices"][0]["message"]["content"]
    items = [{"custom_id": f"q{i}", "body": {**body, "messages": [{"role": "user", "content": "hello " * (i + 1)}]}}
             for i in range(6)]
    items.append({"custom_id": "bad", "body": {"model": "ghost", "messages": HI}})
    items.append({"custom_id": "img", "body": {"model": "tiny", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}]}})
    items.append({"custom_id": "long", "body": {**body, "max_tokens": 5000}})
    out = httpx.post(srv.url + "/ai/v1/generate/batch", json={"mode": "sync", "requests": items}, timeout=60).json()
    assert out["object"] == "generate.batch"
    assert out["summary"] == {"total": 9, "succeeded": 6, "failed": 3}
    for i, d in enumerate(out["data"]):
        assert d["index"] == i and (d["response"] is None) != (d["error"] is None)
    assert out["data"][0]["response"]["choices"][0]["message"]["content"] == \
        httpx.post(srv.url + "/ai/v1/generate", json={**body, "messages": items[0]["body"]["messages"]}).json()[
            "choices"][0]["message"]["content"]
    codes = [d["error"]["code"] for d in out["data"][6:]]
    assert codes == ["MODEL_NOT_FOUND", "UNSUPPORTED_MULTIMODAL", "CONTEXT_LENGTH_EXCEEDED"]
    r = httpx.post(srv.url + "/ai/v1/generate/batch", json={"requests": [{"body": body}] * 129})
    assert_envelope("antfly", r, 400, "requests")


def test_antfly_stream_and_error_envelopes(srv):
    with httpx.stream("POST", srv.url + "/ai/v1/generate", json={"model": "tiny", "messages": HI, "max_tokens": 4,
                                                                 "stream": True}) as r:
        lines = [x for x in r.iter_lines() if x]
    assert lines[-1] == "data: [DONE]" and json.loads(lines[0][6:])["object"] == "chat.completion.chunk"
    b = assert_envelope("antfly", httpx.post(srv.url + "/ai/v1/generate", json={"model": "tiny", "messages": HI,
                                                                              "max_tokens": 900}), 400, "context")
    assert b["error"] == "CONTEXT_LENGTH_EXCEEDED"
    assert_envelope("ollama", httpx.post(srv.url + "/api/chat", json={"model": "tiny", "messages": HI, "stream": False,
                                                                    "options": {"num_ctx": 8}}), 400, "context")
    assert_envelope("antfly", httpx.post(srv.url + "/ai/v1/generate", json={"model": "ghost", "messages": HI}), 404)


# ---- sampling ----------------------------------------------------------------------------------
def complete(oai, **kw):
    kw = {"model": "tiny", "prompt": "hello world", "max_tokens": 16, **kw}
    return oai.completions.create(**kw).choices[0]


def test_seed_temperature_and_greedy(oai):
    a = complete(oai, temperature=1.0, seed=7).text
    assert complete(oai, temperature=1.0, seed=7).text == a  # same seed, same prompt: same output
    others = {complete(oai, temperature=1.0, seed=s).text for s in (8, 9, 10)}
    assert others - {a}  # other seeds give other outputs
    assert complete(oai, temperature=0, seed=1).text == complete(oai, temperature=0, seed=2).text


def test_stop_strings_are_cut_even_across_tokens(oai):
    full = complete(oai, temperature=0, max_tokens=24).text
    stop = full[9:12]
    assert stop and full.index(stop) == 9
    cut = complete(oai, temperature=0, max_tokens=24, stop=[stop])
    assert cut.text == full[:9] and cut.finish_reason == "stop"


def test_logit_bias_top_k_and_penalties(oai, srv):
    ids = httpx.post(srv.url + "/tokenize", json={"content": " world"}).json()["tokens"]
    assert len(ids) == 1
    forced = complete(oai, temperature=1.0, seed=3, logit_bias={str(ids[0]): 100}, max_tokens=5)
    assert forced.text == " world" * 5
    banned = complete(oai, temperature=0, logit_bias={str(ids[0]): -100}, max_tokens=24)
    assert " world" not in banned.text
    top1 = complete(oai, temperature=1.5, seed=4, extra_body={"top_k": 1}).text
    assert top1 == complete(oai, temperature=0).text  # top_k 1 is greedy
    pen = complete(oai, temperature=0, frequency_penalty=2.0, max_tokens=24).text
    assert pen != complete(oai, temperature=0, max_tokens=24).text


def test_logprobs(oai):
    ch = oai.chat.completions.create(model="tiny", messages=HI, max_tokens=5, temperature=0, logprobs=True,
                                     top_logprobs=3).choices[0]
    content = ch.logprobs.content
    assert len(content) == 5 and "".join(t.token for t in content) == ch.message.content
    for t in content:
        tops = [x.logprob for x in t.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and all(x <= 0 for x in tops)
        assert t.logprob == pytest.approx(tops[0])  # greedy takes the most likely token
        assert sum(2.718281828 ** x for x in tops) <= 1.0 + 1e-6
    legacy = complete(oai, temperature=0, max_tokens=3, logprobs=2).logprobs
    assert len(legacy.tokens) == 3 and all(len(d) == 2 for d in legacy.top_logprobs)


def test_grammar_constrains_sampling(oai, srv):
    outs = {complete(oai, temperature=1.0, seed=s, max_tokens=8, extra_body={"grammar": 'root ::= ("yes" | "no") "."'}).text
            for s in range(6)}
    assert outs <= {"yes.", "no."} and outs
    r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "grammar": "root ::= [b-a]"})
    assert_envelope("openai", r, 400)
    r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "grammar": 'root ::= "a"',
                                                      "ignore_eos": True})
    assert_envelope("openai", r, 400, "ignore_eos")


# ---- tokenize / detokenize ---------------------------------------------------------------------
def test_tokenize_detokenize(srv):
    with httpx.Client(base_url=srv.url) as c:
        t = c.post("/tokenize", json={"content": "hello world"}).json()
        assert t["tokens"] and all(isinstance(x, int) for x in t["tokens"])
        with_bos = c.post("/tokenize", json={"content": "hello world", "add_special": True}).json()["tokens"]
        assert len(with_bos) == len(t["tokens"]) + 1
        pieces = c.post("/tokenize", json={"content": "hello world", "with_pieces": True}).json()["tokens"]
        assert "".join(p["piece"] for p in pieces) == "hello world" and [p["id"] for p in pieces] == t["tokens"]
        assert c.post("/detokenize", json={"tokens": t["tokens"]}).json()["content"] == "hello world"
        assert c.post("/tokenize", json={"content": ""}).json()["tokens"] == []
        assert_envelope("openai", c.post("/detokenize", json={"tokens": [10 ** 6]}), 400, "out of range")
        assert_envelope("openai", c.post("/tokenize", json={"model": "ghost", "content": "x"}), 404)


# ---- cancellation and admission ------------------------------------------------------------------
def test_disconnect_mid_stream_frees_the_slot():
    with serve(models=[f"tiny={TINY}"], parallel=1, threads=1) as s:
        body = {"model": "tiny", "messages": HI, "max_tokens": 200, "stream": True, "ignore_eos": True}
        assert httpx.post(s.url + "/v1/chat/completions", json={**body, "max_tokens": 1}).status_code == 200
        rt = runtime(s)
        undo = slow_decode(rt, 0.02)
        try:
            with httpx.stream("POST", s.url + "/v1/chat/completions", json=body) as r:
                it = r.iter_lines()
                got = [next(it) for _ in range(6)]  # a few chunks, then hang up
            assert any("content" in x for x in got)
            wait_for(lambda: rt.scheduler.active == 0, 3)  # the sequence stopped at once
            cache = len(rt.scheduler.slots[0].cache)
            time.sleep(0.2)
            assert len(rt.scheduler.slots[0].cache) == cache  # and nothing more is generated for nobody
            assert cache < 100
            wait_for(lambda: s.service.admission.in_flight == 0, 3)
            # the only slot is free again: the next request runs
            r2 = httpx.post(s.url + "/v1/chat/completions", json={**body, "stream": False, "max_tokens": 3})
            assert r2.status_code == 200 and r2.json()["usage"]["completion_tokens"] == 3
            # a non-streamed request whose client gives up is cancelled too
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(s.url + "/v1/chat/completions", json={**body, "stream": False}, timeout=0.5)
            wait_for(lambda: rt.scheduler.active == 0, 3)
        finally:
            undo()


def test_stop_route_cancels_streams_of_one_model_or_all():
    with serve(models=[f"tiny={TINY}", f"tiny2={TINY}"], threads=1) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        assert_envelope("openai", c.post("/stop", json={"model": "ghost"}), 404)
        assert c.post("/stop").json()["stopped"] == 0
        for m in ("tiny", "tiny2"):
            c.post("/v1/completions", json={"model": m, "prompt": "x", "max_tokens": 1})
        undo = [slow_decode(runtime(s, m), 0.02) for m in ("tiny", "tiny2")]
        results = {}

        def stream(model, key):
            with c.stream("POST", "/api/generate", json={"model": model, "prompt": "hi",
                                                         "options": {"num_predict": 200}}) as r:
                results[key] = [json.loads(x) for x in r.iter_lines() if x]

        try:
            threads = [threading.Thread(target=stream, args=(m, k)) for m, k in
                       (("tiny", "a"), ("tiny2", "b"))]
            for t in threads:
                t.start()
            wait_for(lambda: runtime(s, "tiny").scheduler.active == 1 and runtime(s, "tiny2").scheduler.active == 1)
            assert c.post("/stop", json={"model": "tiny"}).json()["stopped"] == 1
            threads[0].join(5)
            assert results["a"][-1]["done_reason"] == "cancelled" and results["a"][-1]["eval_count"] < 200
            assert threads[1].is_alive()  # the other model's stream goes on
            assert c.post("/stop").json()["stopped"] == 1
            threads[1].join(5)
            assert results["b"][-1]["done_reason"] == "cancelled"
        finally:
            for u in undo:
                u()


def test_admission_slot_is_held_for_the_whole_stream():
    with serve(models=[f"tiny={TINY}"], max_concurrent_requests=1, max_queued_requests=0, threads=1) as s:
        body = {"model": "tiny", "messages": HI, "max_tokens": 100, "stream": True, "ignore_eos": True}
        assert httpx.post(s.url + "/v1/chat/completions", json={**body, "max_tokens": 1}).status_code == 200
        undo = slow_decode(runtime(s), 0.02)
        try:
            with httpx.stream("POST", s.url + "/v1/chat/completions", json=body) as r:
                lines = r.iter_lines()  # (dropping the iterator would close the connection)
                next(lines)
                busy = httpx.post(s.url + "/v1/chat/completions", json={**body, "stream": False})
                assert_envelope("openai", busy, 503)
                assert busy.headers["retry-after"]
        finally:
            undo()
        wait_for(lambda: s.service.admission.in_flight == 0)
        assert httpx.post(s.url + "/v1/chat/completions", json={**body, "stream": False, "max_tokens": 2}).status_code == 200


def test_failure_after_the_stream_started_is_an_error_frame():
    with serve(models=[f"tiny={TINY}"], threads=1) as s:
        httpx.post(s.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1})
        rt = runtime(s).runtime
        real, calls = rt.decode, {"n": 0}

        def flaky(entries):
            calls["n"] += 1
            if calls["n"] % 4 == 0:
                raise RuntimeError("simulated decode failure")
            return real(entries)

        rt.decode = flaky
        try:
            # greedy and no EOS: every stream reaches the 4th decode, which fails
            body = {"model": "tiny", "messages": HI, "max_tokens": 50, "stream": True, "temperature": 0, "ignore_eos": True,
                    "options": {"temperature": 0, "num_predict": 50}}  # (Ollama reads its options)
            for path, fam in (("/v1/chat/completions", "openai"), ("/ai/v1/generate", "antfly"),
                              ("/api/chat", "ollama")):
                calls["n"] = 0
                with httpx.stream("POST", s.url + path, json=body) as r:
                    assert r.status_code == 200
                    lines = [x for x in r.iter_lines() if x]
                assert "[DONE]" not in lines[-1]
                if fam == "antfly":
                    assert lines[-2:] == ["event: error", "data: generation failed: simulated decode failure"]
                elif fam == "openai":
                    assert json.loads(lines[-1][6:])["error"]["code"] == "inference_failed"
                else:
                    assert json.loads(lines[-1]) == {"error": "generation failed: simulated decode failure"}
            calls["n"] = 0
            r = httpx.post(s.url + "/v1/chat/completions", json={**body, "stream": False})
            assert_envelope("openai", r, 500, "simulated decode failure")
        finally:
            del rt.decode
        ok = httpx.post(s.url + "/v1/chat/completions", json={"model": "tiny", "messages": HI, "max_tokens": 3})
        assert ok.status_code == 200  # the worker survived


def test_model_may_be_omitted_with_one_generator_only(srv):
    r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": HI, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == "tiny"
    with serve(models=[f"a={TINY}", f"b={TINY}"], threads=1) as s:
        assert_envelope("openai", httpx.post(s.url + "/tokenize", json={"content": "x"}), 400, "'model' is required")


def test_unsupported_features_are_refused_not_ignored(srv):
    # (tools, response_format, format and think are served: tests/test_tools_*.py, test_structured_*.py)
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny", "messages": HI, "n": 9})
    assert_envelope("openai", r, 400, "n")  # 1..8 (tests/test_conformance_openai.py serves n > 1)
