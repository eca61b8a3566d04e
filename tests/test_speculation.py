"""Speculative decoding inside continuous batching, on the real tiny F32 GGUF (batch-
invariant on CPU): the n-gram drafter and a draft model (the same code and seed with one
layer: tests/fixtures/gguf/tiny-llama-draft.gguf) must give exactly the tokens of plain
decoding, greedy and seeded sampling alike, alone and with several sequences in one decode;
drafts must actually be verified and accepted, and the KV cache must hold no rejected draft."""

from pathlib import Path

import pytest

from inferd.registry.discovery import make_spec
from inferd.models import ModelKind
from inferd.scheduling.speculation import NGRAM, Speculation, ngram_lookup
from tests.test_gen_engine import Run, fresh, load_tiny, prompts

GGUF = Path(__file__).parent / "fixtures" / "gguf"


@pytest.fixture(scope="module")
def gen():
    g = load_tiny()
    yield g
    g.close()


@pytest.fixture(scope="module")
def draft(gen):
    spec = make_spec("tiny-draft", GGUF / "tiny-llama-draft.gguf", "cli", ModelKind.GENERATOR)
    return gen.scheduler.drafters.get(spec.name, lambda: gen.make_draft(spec))


def run(g, prompt, max_tokens, spec=None, **sp):
    r = Run(g, prompt, max_tokens, **sp)
    r.job.speculation = spec
    g.scheduler.submit(r.job)
    return r


def repetitive(g, i=0):
    """A prompt whose continuation the n-gram drafter can find in it: a passage said twice."""
    words = ["hello", "world", "the", "other", "one", "is", "here", "there", "at", "in"]
    passage = " ".join(words[(i + j * 3) % 10] for j in range(24))
    return g.runtime.tokenize(passage + "\n" + passage + "\n" + passage)


def test_ngram_lookup_finds_the_latest_earlier_occurrence():
    assert ngram_lookup([1, 2, 3, 9, 8, 1, 2, 3, 7, 6, 1, 2, 3], 3) == [7, 6, 1]
    assert ngram_lookup([5, 6, 7, 8], 2) == []                      # nothing recurs
    assert ngram_lookup([4, 5, 1, 2, 4, 5], 4) == [1, 2, 4, 5]      # the 2-gram [4, 5]


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.9, "seed": 7}],
                         ids=["greedy", "seeded"])
def test_ngram_speculation_gives_plain_decoding_tokens(gen, sampling):
    p = repetitive(gen)
    fresh(gen)
    plain = run(gen, p, 48, ignore_eos=True, **sampling).wait().tokens
    fresh(gen)
    sp = Speculation(NGRAM, policy="on", k=6)
    before = gen.scheduler.stats.drafted_tokens
    spec = run(gen, p, 48, sp, ignore_eos=True, **sampling).wait().tokens
    assert spec == plain
    assert len(plain) == 48
    assert sp.drafted > 0 and gen.scheduler.stats.drafted_tokens - before == sp.drafted
    if not sampling.get("seed"):
        assert sp.accepted > 0, "greedy output of a repeated passage repeats: drafts should be accepted"


def test_draft_model_speculation_in_one_batch_equals_each_alone(gen, draft):
    ps = [repetitive(gen, i) for i in range(2)] + prompts(gen, 2)
    alone = []
    for p in ps:
        fresh(gen)
        alone.append(run(gen, p, 40, ignore_eos=True).wait().tokens)
    fresh(gen)
    specs = [Speculation(draft, policy="on", k=4) for _ in ps]
    runs = [run(gen, p, 40, s, ignore_eos=True) for p, s in zip(ps, specs)]
    got = [r.wait().tokens for r in runs]
    assert got == alone
    assert sum(s.drafted for s in specs) > 0
    assert sum(s.accepted for s in specs) > 0, "the one-layer draft shares the target's first layer"
    assert max(gen.scheduler.batch_sizes) >= 2  # sequences were verified together


def test_rejected_drafts_leave_the_kv_cache(gen, draft):
    """After a speculative run the slot's cache list and its KV cells agree: a follow-up prompt
    that extends the finished sequence reuses exactly its cached prefix and decodes as plain."""
    p = prompts(gen, 1)[0]
    fresh(gen)
    first = run(gen, p, 24, Speculation(draft, policy="on", k=5), ignore_eos=True).wait()
    follow = p + first.tokens
    spec_next = run(gen, follow, 16, ignore_eos=True).wait()
    assert spec_next.last.usage.cached_prompt_tokens == len(follow) - 1
    fresh(gen)
    plain_next = run(gen, follow, 16, ignore_eos=True).wait()
    assert spec_next.tokens == plain_next.tokens


def test_online_calibration_moves_k_and_auto_gives_up_on_low_acceptance(gen):
    sp = Speculation(NGRAM, policy="auto", calibration="online", k=2)
    sp.record(2, 2)
    assert sp.k == 3
    sp.record(3, 0)
    assert sp.k == 2
    for _ in range(10):
        sp.record(2, 0)
    assert sp.report()["decision"] == "disabled" and sp.report()["disabled_reason"] == "low_acceptance"
    assert sp.want(1) == 0
    big = Speculation(NGRAM, policy="auto")
    assert big.want(16) == 0 and big.want(2) == 4
    assert big.report()["disabled_reason"] == "batch_too_large"  # held back, never drafted
    assert Speculation(None).report() == {**Speculation(None).report(), "decision": "disabled",
                                          "disabled_reason": "no_draft_model"}


def test_a_job_that_ends_inside_a_verify_step_reports_that_steps_drafts(gen):
    """The counts are recorded before the verified tokens leave: the report the final delta
    carries (read by the HTTP side as soon as it arrives) already holds the last step's drafts."""
    p = repetitive(gen)
    for max_tokens in range(20, 29):
        fresh(gen)
        sp = Speculation(NGRAM, policy="on", k=6)
        r = Run(gen, p, max_tokens, ignore_eos=True)
        r.job.speculation = sp
        at_finish: list[dict] = []
        sink = r._sink
        r.job.sink = lambda d, sink=sink: (d.finish_reason and at_finish.append(sp.report()), sink(d))
        gen.scheduler.submit(r.job)
        r.wait()
        assert len(r.tokens) == max_tokens and sp.drafted > 0
        assert at_finish[0]["drafted_tokens"] == sp.drafted, max_tokens
        assert at_finish[0]["accepted_tokens"] == sp.accepted, max_tokens
