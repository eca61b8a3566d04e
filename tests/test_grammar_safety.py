"""Raw grammars can no longer abort the process (issue 9).

llama.cpp throws across ctypes (the process dies, every client with it) when its grammar
sampler is left with no allowed token. Each grammar below did that on main at d5904cf, on
every generation route; the server runs in a child process so the old behaviour fails the
test instead of killing pytest. The checker is also linear now and bounded in nesting."""

import json
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from inferd.chat.gbnf import check_gbnf
from inferd.chat.grammar import json_schema_grammar
from inferd.errors import InvalidInput
from tests.chat_fixtures import HI, TINY, generator_dir
from tests.child_server import alive, child_server

CRASHING = [  # GBNF text (escapes are GBNF's own)
    r'root ::= "\x00"',
    r'root ::= "a" "\x00"',
    r'root ::= [\x00]',
    r'root ::= <[0]>',            # a real token, whose text is "\x00"
    r'root ::= <[999999999]>',    # no such token
    r'root ::= "a" <|im_end|>',   # an end-of-generation token: llama.cpp never lets one match
]


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")
    with child_server(d, "--parallel", "4") as (url, proc):
        yield url, proc


def _sse_error(url, path, body):
    with httpx.stream("POST", url + path, json=body, timeout=60) as r:
        return r.status_code, r.read().decode()


def test_grammars_that_allow_no_token_are_400s_on_every_route(child):
    url, proc = child
    for g in CRASHING:
        for path, body in [("/v1/completions", {"prompt": "hello", "max_tokens": 8}),
                           ("/v1/chat/completions", {"messages": HI, "max_tokens": 8}),
                           ("/ai/v1/generate", {"messages": HI, "max_tokens": 8})]:
            r = httpx.post(url + path, json={"model": "tiny", "grammar": g, **body}, timeout=60)
            assert r.status_code == 400, (g, path, r.text)
            assert alive(url, proc), f"{g!r} on {path} killed the server"
        status, text = _sse_error(url, "/v1/chat/completions",
                                  {"model": "tiny", "messages": HI, "grammar": g, "stream": True, "max_tokens": 8})
        assert status == 400 and "grammar" in text, (g, text)
        assert alive(url, proc), f"{g!r} streamed killed the server"
        items = [{"custom_id": "good", "body": {"model": "tiny", "messages": HI, "max_tokens": 4}},
                 {"custom_id": "bad", "body": {"model": "tiny", "messages": HI, "grammar": g, "max_tokens": 8}}]
        out = httpx.post(url + "/ai/v1/generate/batch", json={"requests": items}, timeout=60).json()
        good, bad = out["data"]
        assert good["response"]["choices"][0]["finish_reason"] in ("stop", "length"), out
        assert bad["response"] is None and bad["error"]["code"] == "INVALID_REQUEST", out
        assert alive(url, proc)
    msgs = {g: httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "grammar": g}).json()
            ["error"]["message"] for g in CRASHING}
    assert "out of range" in msgs[r'root ::= <[999999999]>'] and "vocabulary of 279" in msgs[r'root ::= <[999999999]>']
    assert "no way through this grammar can be sampled" in msgs[r'root ::= "a" "\x00"']
    assert "'\\x00'" in msgs[r'root ::= "a" "\x00"']
    # Token references that can match still work, and the answer follows them.
    r = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 8,
                                                  "grammar": "root ::= <[100]> <[101]> [\\x01]"}, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "de\x01", r.text


DEAD_END = textwrap.dedent('''
    import json, sys, threading
    from inferd.models import ModelKind, ModelSpec
    from inferd.runtimes.llama_cpp.generator import LlamaGenerator
    from inferd.scheduling.generation import GenerationEngine, Job
    from inferd.types import SamplingParams
    gen = LlamaGenerator(ModelSpec("tiny", ModelKind.GENERATOR, "gguf", sys.argv[1], "test"), n_seq=2, n_threads=1)
    engine = GenerationEngine(gen, name="tiny")
    done, out = threading.Event(), {}
    def sink(name):
        def put(d):
            if d.error is not None:
                out[name] = {"error": type(d.error).__name__ + ": " + str(d.error)}
            elif d.finish_reason is not None:
                out[name] = {"finish": d.finish_reason}
            if len(out) == 2:
                done.set()
        return put
    prompt = gen.tokenize("hello")
    # Built directly, past the service's static check: the runtime guard alone must hold.
    bad = gen.make_sampler(SamplingParams(grammar='root ::= "a" "\\\\x00"', seed=1))
    good = gen.make_sampler(SamplingParams(seed=1))
    engine.submit(Job(prompt=prompt, sampler=bad, max_tokens=8, sink=sink("bad")))
    engine.submit(Job(prompt=prompt, sampler=good, max_tokens=8, sink=sink("good")))
    done.wait(60)
    print(json.dumps(out))
    engine.close()
    gen.close()
''')


def test_a_grammar_dead_end_ends_that_sequence_only():
    p = subprocess.run([sys.executable, "-c", DEAD_END, str(TINY)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["good"] == {"finish": "length"}, out
    assert out["bad"]["error"].startswith("GrammarDeadEnd") and "allows no token" in out["bad"]["error"], out


def _chain(n, reverse=False):
    order = reversed(range(n)) if reverse else range(n)
    return "root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1}\n' for i in order) + f'r{n} ::= "z"\n'


def test_checker_is_linear_and_bounded():
    for reverse in (False, True):  # 30.8 s forward on d5904cf, 0.07 s reversed
        g = _chain(10_000, reverse)
        t = time.perf_counter()
        assert check_gbnf(g) == g
        assert time.perf_counter() - t < 3.0
    left = "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} "a"\n' for i in range(5000)) + 'r5000 ::= r0\n'
    with pytest.raises(InvalidInput, match="left recursion"):  # deep, found without Python recursion
        check_gbnf(left)
    with pytest.raises(InvalidInput, match="nested more than 100 deep"):  # RecursionError (500) on d5904cf
        check_gbnf("root ::= " + "(" * 250 + '"a"' + ")" * 250)
    assert check_gbnf("root ::= " + "(" * 50 + '"a"' + ")" * 50)
    with pytest.raises(InvalidInput) as e:  # regex nested 300 deep: RecursionError on d5904cf
        json_schema_grammar({"type": "string", "pattern": "(" * 300 + "a" + ")" * 300})
    assert "nested" in e.value.message and e.value.param == "response_format"


def test_deep_nesting_over_http_is_400(child):
    url, _ = child
    r = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "hi",
                                                  "grammar": "root ::= " + "(" * 250 + '"a"' + ")" * 250})
    assert r.status_code == 400 and "nested" in r.json()["error"]["message"]
    schema = {"type": "object", "properties": {"p": {"type": "string", "pattern": "(" * 300 + "a" + ")" * 300}}}
    r = httpx.post(url + "/v1/chat/completions", json={"model": "tiny", "messages": HI, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 400 and "nested" in r.json()["error"]["message"], r.text
