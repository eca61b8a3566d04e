"""The speech runtimes on their fixtures, without HTTP: token ids equal transformers' on the same
weights (tiny random Whisper through CTranslate2, tiny random Wav2Vec2 through onnxruntime),
audio decoding of every committed format, budgets, VAD windows, and the window queue."""

from __future__ import annotations

import asyncio
import io
import json
import wave

import numpy as np
import pytest

from inferd.errors import CapabilityMissing, InvalidInput, PayloadTooLarge
from inferd.runtimes.speech import DecodeOptions, load_ctc, load_whisper
from inferd.runtimes.speech.audio import decode
from inferd.runtimes.speech.chunking import plan
from inferd.speech_types import Chunk
from inferd.scheduling.speech import SpeechQueue
from tests.conftest import FIXTURES

SPEECH = FIXTURES / "speech"
CLIPS = SPEECH / "clips"
GREEDY = dict(beam_size=1, temperatures=(0.0,))


def clip(name: str) -> np.ndarray:
    return decode((CLIPS / name).read_bytes(), 16000)


def wav_bytes(samples: np.ndarray, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


@pytest.fixture(scope="module")
def whisper():
    rt = load_whisper(SPEECH / "whisper-tiny-random", threads=1, name="tiny-random")
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def ctc():
    rt = load_ctc(SPEECH / "wav2vec2-tiny-random", threads=1, name="w2v")
    yield rt
    rt.close()


# ---- audio ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(p.name for p in CLIPS.iterdir() if p.suffix != ".json"))
def test_every_committed_format_decodes_to_the_same_length(name):
    a = clip(name)
    ref = clip(name.split(".")[0] + ".wav")
    assert a.dtype == np.float32 and a.ndim == 1
    assert abs(a.shape[0] - ref.shape[0]) < 0.08 * 16000  # codec padding differs by a few ms
    assert 0.05 < float(np.abs(a).max()) <= 1.0


def test_resampled_to_the_models_rate():
    a8 = decode(wav_bytes(clip("fox.wav")[::2], rate=8000), 16000)
    assert abs(a8.shape[0] - clip("fox.wav").shape[0]) < 400


@pytest.mark.parametrize("data, words", [(b"", "empty"), (b"this is not audio at all", "could not decode"),
                                         (wav_bytes(np.zeros(0)), "no samples")])
def test_bad_audio_is_invalid_input(data, words):
    with pytest.raises(InvalidInput) as e:
        decode(data, 16000)
    assert words in e.value.message


def test_audio_over_the_duration_budget_is_refused():
    with pytest.raises(PayloadTooLarge):
        decode((CLIPS / "fox.mp3").read_bytes(), 16000, max_seconds=1.0)
    assert decode((CLIPS / "fox.mp3").read_bytes(), 16000, max_seconds=10.0).shape[0] > 16000


def test_long_audio_is_cut_at_pauses_into_windows_of_at_most_30s():
    gap = np.zeros(16000 * 2, np.float32)
    parts = [clip("fox.wav"), gap, clip("call.wav"), gap, clip("walk.wav"), gap] * 3
    audio = np.concatenate(parts)
    assert audio.shape[0] > 30 * 16000
    chunks = plan(audio, 16000, "en")
    assert len(chunks) >= 2
    assert all(c.audio.shape[0] <= 30 * 16000 for c in chunks)
    assert [c.offset for c in chunks] == sorted(c.offset for c in chunks)
    for c in chunks:  # each window is the file's own samples at its offset
        start = int(round(c.offset * 16000))
        assert np.array_equal(c.audio, audio[start:start + c.audio.shape[0]])
    short = plan(clip("fox.wav"), 16000, None)
    assert len(short) == 1 and short[0].offset == 0.0 and short[0].language is None


# ---- Whisper on its fixture -------------------------------------------------------------------
def test_whisper_fixture_is_multilingual(whisper):
    assert whisper.multilingual and {"translate", "language_detection"} <= whisper.capabilities


@pytest.mark.parametrize("task", ["transcribe", "translate"])
def test_whisper_tokens_equal_transformers(whisper, task):
    ref = json.loads((SPEECH / "whisper-tiny-random" / "reference.json").read_text())["clips"]
    chunks = [Chunk(clip(n), 0.0, None) for n in ref]  # auto language, detected per window in one batch
    out = whisper.decode_batch(chunks, DecodeOptions(task=task, **GREEDY))
    for (name, r), res in zip(ref.items(), out):
        assert res.language == r["language"], name
        assert res.tokens == r[task]["tokens"], name
        assert "".join(s.text for s in res.segments).strip() == r[task]["text"].strip()
        assert 0.0 < res.language_probability <= 1.0


def test_whisper_batches_windows_with_different_prompts(whisper):
    """Windows of different languages (equal prompt lengths) share a generate call; a given
    language skips detection; an initial prompt makes a longer prompt, decoded on its own."""
    ref = json.loads((SPEECH / "whisper-tiny-random" / "reference.json").read_text())["clips"]
    name = "fox.wav"
    alone = whisper.decode_batch([Chunk(clip(name), 0.0, ref[name]["language"])], DecodeOptions(**GREEDY))[0]
    assert alone.tokens == ref[name]["transcribe"]["tokens"] and alone.language_probability == 1.0
    mixed = whisper.decode_batch([Chunk(clip(name), 0.0, None), Chunk(clip("call.wav"), 0.0, "de")],
                                 DecodeOptions(**GREEDY))
    assert mixed[0].tokens == ref[name]["transcribe"]["tokens"] and mixed[1].language == "de"
    prompted = whisper.decode_batch([Chunk(clip(name), 0.0, "en")], DecodeOptions(initial_prompt="hello there", **GREEDY))
    assert prompted[0].tokens != alone.tokens or ref[name]["language"] == "en"


def test_whisper_checks_capabilities_and_languages(whisper):
    whisper.check(DecodeOptions(task="translate"), "de")
    with pytest.raises(InvalidInput):
        whisper.check(DecodeOptions(), "xx")


# ---- CTC on its fixture -----------------------------------------------------------------------
def test_ctc_logits_and_tokens_equal_transformers(ctc):
    ref = json.loads((SPEECH / "wav2vec2-tiny-random" / "reference.json").read_text())["clips"]
    waves = [clip(n) for n in ref]
    logits = ctc.logits(waves)  # one padded, masked batch of three lengths
    for (name, r), lg in zip(ref.items(), logits):
        want = np.array(r["logits"], dtype=np.float32)
        assert lg.shape == want.shape, name
        assert np.abs(lg - want).max() < 1e-3, name
    out = ctc.decode_batch([Chunk(w, 0.0, "en") for w in waves], DecodeOptions(word_timestamps=True))
    for (name, r), res in zip(ref.items(), out):
        assert res.tokens == r["tokens"], name
        assert res.segments[0].text.strip() == r["text"]
        words = res.segments[0].words
        assert words and all(0 <= w.start < w.end <= len(waves[0]) / 16000 + 1 for w in words)
        assert [w.start for w in words] == sorted(w.start for w in words)


def test_ctc_cannot_translate_or_take_a_prompt(ctc):
    with pytest.raises(CapabilityMissing) as e:
        ctc.check(DecodeOptions(task="translate"), None)
    assert "translate" in e.value.message
    with pytest.raises(InvalidInput):
        ctc.check(DecodeOptions(initial_prompt="x"), None)


# ---- the window queue -------------------------------------------------------------------------
async def test_queue_batches_windows_of_concurrent_requests_and_drops_cancelled_ones(ctc):
    q = SpeechQueue(ctc, max_batch=8, name="w2v")
    try:
        opts = DecodeOptions()
        w = clip("fox.wav")
        a = q.submit([Chunk(w, 0.0, "en")] * 3, opts)
        b = q.submit([Chunk(w, 0.0, "en")] * 2, opts)
        gone = q.submit([Chunk(w, 0.0, "en")] * 4, DecodeOptions(word_timestamps=True))
        for f in gone:
            f.cancel()  # a client that left: its windows never run
        results = await asyncio.gather(*a, *b)
        assert len({tuple(r.tokens) for r in results}) == 1
        assert q.stats.largest_batch == 5 and q.stats.batches == 1 and q.stats.cancelled == 4
    finally:
        q.close()


async def test_a_failing_batch_fails_every_window_it_holds(ctc):
    q = SpeechQueue(ctc, name="w2v")
    try:
        futs = q.submit([Chunk(np.zeros(10, np.float32), 0.0, "en")] * 2, DecodeOptions())  # too short to convolve
        for f in futs:
            with pytest.raises(Exception):
                await f
        ok = await q.submit([Chunk(clip("call.wav"), 0.0, "en")], DecodeOptions())[0]
        assert ok.tokens and q.stats.failed_batches == 1
    finally:
        q.close()
