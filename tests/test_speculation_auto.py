"""Speculation by default: `speculation_policy: auto` with no draft model named drafts with the
engine's n-gram drafter. Checked on the real tiny F32 GGUF (batch-invariant on CPU, so the
tokens must equal plain decoding's exactly):

- the per-request index finds what the reference scan (ngram_lookup) finds;
- the shared pool: vectorized writes and the per-draft hash agree, its memory is fixed and
  new n-grams evict old ones, image placeholders are never drafted;
- the policy by value: a grounded prompt drafts and accepts, a short open prompt does not
  draft ("ungrounded"), rejected drafts back off 1, 2, 4 ... steps and then give up;
- the pool across requests: a second request repeating the first's output, on a prompt too
  short for prompt lookup, gets its drafts from the pool, accepted, with the plain text; a
  `prompt_cache: false` request writes nothing into it;
- over HTTP with no speculation field: the Antfly `speculation` report and /v1's `timings`;
  a sampled request does not draft by default ("sampled")."""

import random
from pathlib import Path

import httpx
import pytest

from inferd.scheduling.ngram import ContextIndex, NgramPool, _hash, ngram_lookup
from inferd.scheduling.speculation import AUTO_NGRAM_K, Speculation
from tests.test_gen_engine import Run, fresh, load_tiny

GGUF = Path(__file__).parent / "fixtures" / "gguf"
WORDS = ["hello", "world", "the", "other", "one", "is", "here", "there", "at", "in"]


@pytest.fixture(scope="module")
def gen():
    g = load_tiny()
    yield g
    g.close()


def run(g, prompt, max_tokens, spec=None, **kw):
    r = Run(g, prompt, max_tokens, ignore_eos=True)
    r.job.speculation = spec
    for name, value in kw.items():
        setattr(r.job, name, value)
    g.scheduler.submit(r.job)
    return r.wait()


def implicit(g):
    """What the service plans for a request that names no speculation field."""
    return Speculation(g.scheduler.ngram, policy="auto", k=AUTO_NGRAM_K, implicit=True)


def test_the_context_index_finds_what_the_scan_finds():
    rnd = random.Random(3)
    for n_min in (2, 3):
        for _ in range(20):
            ctx: list[int] = []
            idx = ContextIndex(n_min)
            for _step in range(120):
                ctx.append(rnd.randrange(6))
                if rnd.random() < 0.5:  # updated now and then, as a job drafts only on some steps
                    idx.update(ctx)
                    assert idx.lookup(ctx, 5) == ngram_lookup(ctx, 5, n_min=n_min), ctx


def test_the_pool_chains_its_own_writes_and_never_drafts_an_image_id():
    pool = NgramPool(1 << 20, n=3)  # roomy: no two of these 297 n-grams share a slot
    toks = random.Random(1).sample(range(5000), 300)
    pool.add(toks)
    assert pool.draft(toks[:3], 50) == toks[3:53]  # numpy's hashes of the writes = the draft's own
    assert pool.draft(toks[100:103], 4) == toks[103:107]
    assert pool.writes == 297 and pool.used() <= 297
    pool.add([7, 8, 9, -2, 11, 12, 13, 14], 0)
    assert pool.draft([7, 8, 9], 2) == []             # the token after them is an image placeholder
    assert pool.draft([-2, 11, 12], 2) == []          # an n-gram with one is never written
    assert pool.draft([11, 12, 13], 2) == [14]
    assert _hash([11, 12, 13]) != _hash([11, 12, 14])
    # a long prompt (the numpy path) whose image placeholders are hashes beyond int64's range
    fresh, big = NgramPool(1 << 20, n=3), -(1 << 70)
    fresh.add(toks[:40] + [big] * 4 + toks[200:240], 0)
    assert fresh.draft(toks[200:203], 3) == toks[203:206]
    assert fresh.draft(toks[37:40], 2) == []  # the token after them is a placeholder


def test_the_pool_has_fixed_memory_and_new_ngrams_evict_old_ones():
    pool = NgramPool(16, n=3)
    toks = list(range(1000, 1600))
    pool.add(toks)
    assert pool.nbytes == 16 * 12 and pool._keys is not None and pool._keys.nbytes + pool._vals.nbytes == 16 * 12
    assert pool.used() <= 16 and pool.writes == 597
    assert pool.draft(toks[-4:-1], 3) == [toks[-1]]   # the newest n-gram holds its slot
    early = sum(pool.draft(toks[i:i + 3], 1) == [toks[i + 3]] for i in range(100))
    assert early == 0                                  # the first 100 were all overwritten
    with pytest.raises(ValueError):
        NgramPool(0)


def test_auto_backs_off_after_rejections_and_gives_up():
    sp = Speculation(None, policy="auto", k=8, implicit=True)
    sp.disabled_reason = None  # a drafter's presence is all want() reads beyond the policy
    sp.record(8, 0)
    assert (sp.cooldown, sp.k) == (1, 4)
    assert [sp.want(1) for _ in range(2)] == [0, 4]    # one step skipped
    sp.record(4, 0)
    assert [sp.want(1) for _ in range(3)] == [0, 0, 2]  # two skipped, k halved again
    sp.record(2, 2)                                      # a full acceptance: no more waiting, k grows
    assert (sp.backoff, sp.want(1)) == (0, 4)
    for _ in range(3):
        sp.record(4, 0)
        while sp.want(1) == 0 and sp.disabled_reason is None:
            pass
    assert sp.report()["disabled_reason"] == "low_acceptance" and sp.want(1) == 0
    assert sp.report()["drafted_tokens"] == 26 and sp.report()["accepted_tokens"] == 2


def test_a_grounded_prompt_drafts_by_default_with_the_plain_tokens(gen):
    passage = " ".join(WORDS[(j * 3) % 10] for j in range(40))
    p = gen.runtime.tokenize(passage + "\n" + passage)
    assert len(p) >= 64
    fresh(gen)
    plain = run(gen, p, 48, prompt_cache=False).tokens
    fresh(gen)
    sp = implicit(gen)
    got = run(gen, p, 48, sp, prompt_cache=False).tokens
    assert got == plain and len(plain) == 48
    r = sp.report()
    assert (r["decision"], r["disabled_reason"], r["draft_model"]) == ("enabled", None, "ngram")
    assert sp.grounded is True and sp.drafted > 0 and sp.accepted > 0


def test_a_short_open_prompt_does_not_draft(gen):
    p = gen.runtime.tokenize("one is here")
    assert len(p) < 64
    fresh(gen)
    sp = implicit(gen)
    run(gen, p, 24, sp, prompt_cache=False)
    if sp.pool_drafted == 0:  # the tiny model's text may repeat itself: then the pool drafts it
        assert sp.drafted == 0 and sp.report()["disabled_reason"] == "ungrounded"
    assert sp.drafted == sp.pool_drafted and sp.grounded is False  # never prompt lookup


def test_a_repeated_request_drafts_from_the_shared_pool(gen):
    p = gen.runtime.tokenize("there at in world hello")
    assert len(p) < 64
    fresh(gen)
    first = run(gen, p, 40).tokens  # plain, and written into the pool when it ends
    sp = implicit(gen)
    again = run(gen, p, 40, sp).tokens
    assert again == first
    assert sp.grounded is False  # too short for prompt lookup: every draft came from the pool
    assert sp.pool_drafted == sp.drafted > 0 and sp.pool_accepted == sp.accepted > 0
    assert sp.accepted >= 20, "the whole answer is in the pool"


def test_a_request_that_keeps_nothing_writes_nothing_into_the_pool(gen):
    pool = gen.scheduler.ngram.pool
    before = pool.writes
    run(gen, gen.runtime.tokenize("in at the world is"), 16, implicit(gen), prompt_cache=False)
    run(gen, gen.runtime.tokenize("in at the world is other"), 16, prompt_cache=False)
    assert pool.writes == before
    run(gen, gen.runtime.tokenize("in at the world is other one"), 16)
    assert pool.writes > before


# ---- over HTTP, no speculation field in the request -----------------------------------------

@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    import json
    import shutil

    from tests.server import serve

    d = tmp_path_factory.mktemp("auto")
    m = d / "generators" / "tiny"
    m.mkdir(parents=True)
    shutil.copy(GGUF / "tiny-llama.gguf", m / "model.gguf")
    (m / "model_manifest.json").write_text(json.dumps({"n_ctx": 512}))
    with serve(models_dir=str(d), parallel=4, threads=1) as s:
        yield s


def post(s, path, content, **body):
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], "temperature": 0,
            "max_tokens": 40, "ignore_eos": True, **body}
    r = httpx.post(s.url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_default_requests_report_auto_speculation(srv):
    passage = " ".join(WORDS[(j * 7) % 10] for j in range(40))
    grounded = f"Copy this: {passage}\n{passage}"
    plain = post(srv, "/ai/v1/generate", grounded, speculation_policy="off", prompt_cache=False)
    auto = post(srv, "/ai/v1/generate", grounded, prompt_cache=False)
    assert auto["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    sp = auto["speculation"]
    assert (sp["policy"], sp["decision"], sp["draft_model"]) == ("auto", "enabled", "ngram")
    assert sp["drafted_tokens"] > 0 and 0 < sp["accepted_tokens"] <= sp["drafted_tokens"]
    assert plain["speculation"]["disabled_reason"] == "policy_off"
    v1 = post(srv, "/v1/chat/completions", grounded, prompt_cache=False)
    assert v1["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert v1["timings"]["draft_n"] > 0 and 0 < v1["timings"]["draft_n_accepted"] <= v1["timings"]["draft_n"]

    short = "tell me about it"
    first = post(srv, "/ai/v1/generate", short)
    assert first["speculation"]["pool_drafted_tokens"] == first["speculation"]["drafted_tokens"]
    again = post(srv, "/ai/v1/generate", short)
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    sp = again["speculation"]
    assert sp["decision"] == "enabled" and sp["pool_accepted_tokens"] == sp["accepted_tokens"] > 0
    sampled = post(srv, "/ai/v1/generate", short, temperature=1.0, seed=3)["speculation"]
    assert (sampled["decision"], sampled["disabled_reason"], sampled["drafted_tokens"]) == ("disabled", "sampled", 0)


def test_no_spec_auto_turns_the_default_off(tmp_path):
    from inferd.cli import build_parser
    from inferd.config import load_settings
    from inferd.service.loading import runtime_options

    ns = build_parser().parse_args(["serve", "--no-spec-auto", "--spec-pool-entries", "1024"])
    opts = runtime_options(load_settings({k: getattr(ns, k) for k in ("spec_auto", "spec_pool_entries")}))
    assert (opts.spec_auto, opts.spec_pool_entries) == (False, 1024)
