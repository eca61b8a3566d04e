"""Whisper exported to ONNX (optimum's layout) on the tiny random fixture
(scripts/make_tiny_whisper.py): the numpy log-mel against transformers' WhisperFeatureExtractor,
token ids against transformers' generate for both decoder layouts (split and merged), the real
HTTP routes (OpenAI transcriptions/translations in every response format, Antfly's transcribe),
and discovery telling a Whisper export from a CTC model.onnx and from a broken folder."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from inferd.runtimes.speech.audio import decode
from inferd.speech_types import Chunk, DecodeOptions
from tests.conftest import FIXTURES
from tests.server import serve

SPEECH = FIXTURES / "speech"
CLIPS = SPEECH / "clips"
WONNX = SPEECH / "whisper-onnx-tiny"
REF = json.loads((WONNX / "reference.json").read_text())
CLIPREF = REF["clips"]
CREF = json.loads((SPEECH / "wav2vec2-tiny-random" / "reference.json").read_text())["clips"]
GREEDY = {"beam_size": 1, "temperature_fallback": False}  # the references are transformers' greedy decoding
TS_BEGIN = json.loads((WONNX / "generation_config.json").read_text())["no_timestamps_token_id"] + 1
SPLIT = ("decoder_model.onnx", "decoder_with_past_model.onnx")
MERGED = ("decoder_model_merged.onnx",)


def layout(dest: Path, graphs: tuple[str, ...], drop: tuple[str, ...] = ()) -> Path:
    """The fixture folder with one decoder layout only (and without `drop`)."""
    dest.mkdir(parents=True)
    other = set(SPLIT + MERGED) - set(graphs)
    for p in WONNX.iterdir():
        if p.name not in other and p.name not in drop:
            shutil.copy(p, dest / p.name)
    return dest


def clip(name: str) -> np.ndarray:
    return decode((CLIPS / name).read_bytes(), 16000)


# ---- features --------------------------------------------------------------------------------
def test_log_mel_equals_whisper_feature_extractor():
    from inferd.runtimes.speech.mel import LogMel

    ref = np.load(WONNX / "mel.npz")
    pre = json.loads((WONNX / "preprocessor_config.json").read_text())
    mel = LogMel.from_config(pre)(clip(str(ref["clip"])))
    assert mel.shape == ref["mel"].shape == (80, 3000)
    assert np.abs(mel - ref["mel"]).max() < 1e-4
    # the padding is part of the window: its frames sit at the clamp floor, 8 below the max (/4)
    assert mel[:, -1].max() == pytest.approx(mel.max() - 2.0, abs=1e-5)


def test_log_mel_of_other_audio_differs():
    from inferd.runtimes.speech.mel import LogMel

    ref = np.load(WONNX / "mel.npz")["mel"]
    assert np.abs(LogMel()(clip("call.wav")) - ref).max() > 0.1


# ---- decoding, both layouts -----------------------------------------------------------------
@pytest.fixture(scope="module", params=["split", "merged"])
def runtime(request, tmp_path_factory):
    from inferd.runtimes.speech import load_whisper_onnx

    folder = layout(tmp_path_factory.mktemp(request.param) / "w", SPLIT if request.param == "split" else MERGED)
    rt = load_whisper_onnx(folder, threads=1, name="w")
    assert rt.merged == (request.param == "merged")
    return rt


CASES = {
    "transcribe": (None, DecodeOptions(beam_size=1, temperatures=(0.0,))),
    "translate": (None, DecodeOptions(task="translate", beam_size=1, temperatures=(0.0,))),
    "german": ("de", DecodeOptions(beam_size=1, temperatures=(0.0,))),
    "prompt": (None, DecodeOptions(beam_size=1, temperatures=(0.0,), initial_prompt=REF["prompt"])),
    "timestamps": (None, DecodeOptions(beam_size=1, temperatures=(0.0,), timestamps=True)),
    "beam3": (None, DecodeOptions(beam_size=3, temperatures=(0.0,))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_token_ids_equal_transformers_generate(runtime, case):
    language, opts = CASES[case]
    names = list(CLIPREF)
    res = runtime.decode_batch([Chunk(clip(n), 0.0, language) for n in names], opts)  # both clips in one batch
    for name, r in zip(names, res):
        assert r.tokens == CLIPREF[name][case]["tokens"], (case, name)
        assert r.language == (language or CLIPREF[name]["language"])


def test_language_detection_and_scores(runtime):
    res = runtime.decode_batch([Chunk(clip("fox.wav"), 0.0, None)], CASES["transcribe"][1])[0]
    assert res.language == CLIPREF["fox.wav"]["language"] and 0 < res.language_probability <= 1
    seg = res.segments[0]
    assert seg.text == CLIPREF["fox.wav"]["transcribe"]["text"]
    assert seg.avg_logprob < 0 and 0 <= seg.no_speech_prob <= 1 and seg.compression_ratio > 1
    assert seg.confidence == pytest.approx(np.exp(seg.avg_logprob))
    assert (seg.start, seg.end) == (0.0, pytest.approx(3.44, abs=0.01))  # the clip, not the padded window


def test_timestamp_segments_follow_the_tokens(runtime):
    ts = runtime.ts_begin
    res = runtime.decode_batch([Chunk(clip("fox.wav"), 10.0, None)], CASES["timestamps"][1])[0]
    tokens = CLIPREF["fox.wav"]["timestamps"]["tokens"]
    assert len(res.segments) >= 2
    at = 0
    for s in res.segments:
        at = tokens.index(s.tokens[0], at)
        assert tokens[at:at + len(s.tokens)] == s.tokens
        at += len(s.tokens)
        if s.tokens[0] >= ts:  # a segment opens on its timestamp, offset by the window's place
            assert s.start == pytest.approx(10.0 + (s.tokens[0] - ts) * 0.02)
        assert s.end > s.start


def test_fallback_ladder_tries_higher_temperatures(runtime):
    """The random model's text is repetitive (compression ratio over 2.4): the ladder samples."""
    res = runtime.decode_batch([Chunk(clip("call.wav"), 0.0, "en")],
                               DecodeOptions(beam_size=1, best_of=2, temperatures=(0.0, 0.5, 1.0)))[0]
    assert res.segments and res.segments[0].temperature == 1.0  # every rung failed: the ladder's last


def test_refusals(runtime):
    from inferd.errors import CapabilityMissing, InvalidInput

    with pytest.raises(CapabilityMissing):
        runtime.check(DecodeOptions(word_timestamps=True), None)
    with pytest.raises(InvalidInput):
        runtime.check(DecodeOptions(), "xx")
    runtime.check(DecodeOptions(task="translate"), "fr")


def test_broken_exports_fail_to_load_with_the_reason(tmp_path):
    from inferd.errors import ModelLoadFailed
    from inferd.runtimes.speech import load_whisper_onnx

    with pytest.raises(ModelLoadFailed, match="decoder_model_merged"):
        load_whisper_onnx(layout(tmp_path / "a", (), drop=()), name="a")
    with pytest.raises(ModelLoadFailed, match="tokenizer.json"):
        load_whisper_onnx(layout(tmp_path / "b", SPLIT, drop=("tokenizer.json",)), name="b")


# ---- discovery ------------------------------------------------------------------------------
def test_discovery_tells_whisper_onnx_from_ctc_and_broken(tmp_path):
    from inferd.models import ModelKind
    from inferd.registry.discovery import make_spec

    w = make_spec("w", WONNX, "cli")
    assert (w.kind, w.format, w.manifest["transcriber"]) == (ModelKind.TRANSCRIBER, "onnx", "whisper-onnx")
    assert {"transcribe", "translate", "language_detection", "timestamps"} <= w.capabilities
    assert "word_timestamps" not in w.capabilities
    c = make_spec("c", SPEECH / "wav2vec2-tiny-random", "cli")
    assert (c.kind, c.format, c.manifest["transcriber"]) == (ModelKind.TRANSCRIBER, "onnx", "ctc")
    b = make_spec("b", layout(tmp_path / "b", (), drop=("decoder_weights.bin",)), "cli", ModelKind.TRANSCRIBER)
    assert "decoder_model.onnx" in b.manifest["unsupported"] and b.capabilities == {"unsupported"}


# ---- over HTTP ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models") / "transcribers"
    layout(d / "wonnx", SPLIT)
    layout(d / "wonnx-merged", MERGED)
    layout(d / "broken", (), drop=("decoder_weights.bin",))
    shutil.copytree(SPEECH / "wav2vec2-tiny-random", d / "w2v")
    with serve(models_dir=str(d.parent), threads=1) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_catalog_lists_the_export_and_the_broken_folder(srv):
    cat = httpx.get(srv.url + "/ai/v1/models").json()["transcribers"]
    assert {"wonnx", "wonnx-merged", "broken", "w2v"} <= set(cat)
    assert {"translate", "language_detection", "timestamps"} <= set(cat["wonnx"]["capabilities"])
    assert "word_timestamps" not in cat["wonnx"]["capabilities"]
    assert "missing" in cat["broken"]["unsupported"] and cat["wonnx"]["format"] == "onnx"


@pytest.mark.parametrize("model", ["wonnx", "wonnx-merged"])
def test_transcription_json_equals_the_reference(client, model):
    r = client.audio.transcriptions.create(model=model, file=open(CLIPS / "fox.wav", "rb"), extra_body=GREEDY)
    assert r.text == CLIPREF["fox.wav"]["transcribe"]["text"].strip()
    assert r.language == CLIPREF["fox.wav"]["language"] and 0 < r.language_probability <= 1
    assert r.duration == pytest.approx(3.44, abs=0.05)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the client marks translations deprecated
def test_translation_language_prompt_and_beams(client):
    f = CLIPS / "call.wav"
    ref = CLIPREF["call.wav"]
    r = client.audio.translations.create(model="wonnx", file=open(f, "rb"), extra_body=GREEDY)
    assert r.text == ref["translate"]["text"].strip() != ref["transcribe"]["text"].strip()
    r = client.audio.transcriptions.create(model="wonnx", file=open(f, "rb"), language="de", extra_body=GREEDY)
    assert r.text == ref["german"]["text"].strip() and r.language == "de"
    r = client.audio.transcriptions.create(model="wonnx", file=open(f, "rb"), prompt=REF["prompt"], extra_body=GREEDY)
    assert r.text == ref["prompt"]["text"].strip()
    r = client.audio.transcriptions.create(model="wonnx-merged", file=open(f, "rb"),
                                           extra_body={"beam_size": 3, "temperature_fallback": False})
    assert r.text == ref["beam3"]["text"].strip()


def test_text_verbose_json_srt_vtt(client):
    f = CLIPS / "fox.flac"  # lossless: the same samples as fox.wav
    text = client.audio.transcriptions.create(model="wonnx", file=open(f, "rb"), response_format="text",
                                              extra_body=GREEDY)
    assert text.strip() == CLIPREF["fox.wav"]["transcribe"]["text"].strip()
    v = client.audio.transcriptions.create(model="wonnx", file=open(f, "rb"), response_format="verbose_json",
                                           timestamp_granularities=["segment"], extra_body=GREEDY)
    tokens = CLIPREF["fox.wav"]["timestamps"]["tokens"]
    assert len(v.segments) >= 2 and v.segments[0].start == pytest.approx((tokens[0] - TS_BEGIN) * 0.02)
    at = 0
    for seg in v.segments:  # each segment is the next run of the reference's tokens
        at = tokens.index(seg.tokens[0], at)
        assert tokens[at:at + len(seg.tokens)] == seg.tokens
        at += len(seg.tokens)
    for s in v.segments:
        assert s.avg_logprob < 0 and 0 <= s.no_speech_prob <= 1 and s.temperature == 0 and s.end > s.start
    srt = client.audio.transcriptions.create(model="wonnx", file=open(f, "rb"), response_format="srt",
                                             extra_body=GREEDY)
    assert srt.startswith("1\n00:00:00,780 --> ") and "\n2\n" in srt
    vtt = client.audio.transcriptions.create(model="wonnx", file=open(f, "rb"), response_format="vtt",
                                             extra_body=GREEDY)
    assert vtt.startswith("WEBVTT\n\n00:00:00.780 --> ")


def test_stream_and_antfly_transcribe(srv):
    with open(CLIPS / "fox.wav", "rb") as f:
        r = httpx.post(srv.url + "/v1/audio/transcriptions", files={"file": ("fox.wav", f)}, timeout=60,
                       data={"model": "wonnx", "stream": "true", **{k: str(v).lower() for k, v in GREEDY.items()}})
    assert r.status_code == 200
    events = [json.loads(ln[6:]) for ln in r.text.split("\n") if ln.startswith("data: {")]
    assert events[-1]["type"] == "transcript.text.done"
    assert events[-1]["text"] == CLIPREF["fox.wav"]["transcribe"]["text"].strip()
    audio = base64.b64encode((CLIPS / "call.wav").read_bytes()).decode()
    r = httpx.post(srv.url + "/ai/v1/transcribe", json={"model": "wonnx-merged", "audio": audio, "language": "en"},
                   timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    item = body["data"][0]
    assert body["model"] == "wonnx-merged" and item["object"] == "transcription" and item["language"] == "en"
    assert item["text"] and body["usage"]["completion_tokens"] > 0


def test_ctc_folder_is_still_ctc(client):
    r = client.audio.transcriptions.create(model="w2v", file=open(CLIPS / "fox.wav", "rb"))
    assert r.text == CREF["fox.wav"]["text"]


def test_refusals_are_4xx_in_both_families(srv):
    wav = (CLIPS / "fox.wav").read_bytes()
    r = httpx.post(srv.url + "/v1/audio/transcriptions", files={"file": ("a.wav", wav)}, timeout=60,
                   data={"model": "wonnx", "response_format": "verbose_json", "timestamp_granularities[]": "word"})
    assert r.status_code == 400 and "word_timestamps" in r.json()["error"]["message"]
    r = httpx.post(srv.url + "/v1/audio/transcriptions", files={"file": ("a.wav", wav)}, data={"model": "broken"},
                   timeout=60)
    assert r.status_code == 400 and "missing" in r.json()["error"]["message"], r.text
    r = httpx.post(srv.url + "/ai/v1/transcribe", json={"model": "broken", "audio": base64.b64encode(wav).decode()},
                   timeout=60)
    assert r.status_code == 400 and r.json()["error"] == "MODEL_NOT_SUPPORTED", r.text
    r = httpx.post(srv.url + "/v1/audio/transcriptions", files={"file": ("a.wav", wav)}, timeout=60,
                   data={"model": "wonnx", "language": "xx"})
    assert r.status_code == 400


async def test_realtime_websocket_transcribes_with_the_export(srv):
    """The realtime transcription session drives any transcriber through the speech service:
    a committed buffer (24 kHz PCM, resampled to the model's 16 kHz) comes back as a transcript."""
    import asyncio

    conn_cfg = {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None,
        "transcription": {"model": "wonnx", "language": "en"}}}}
    x = decode((CLIPS / "fox.wav").read_bytes(), 24000)
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        assert (await conn.recv()).type == "session.created"
        await conn.session.update(session=conn_cfg)
        updated = await conn.recv()
        assert updated.type == "session.updated" and updated.session.audio.input.transcription.model == "wonnx"
        for i in range(0, len(pcm), 4800):
            await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + 4800]).decode())
        await conn.input_audio_buffer.commit()
        events: list = []
        async with asyncio.timeout(120):
            while not events or events[-1].type != "conversation.item.input_audio_transcription.completed":
                events.append(await conn.recv())
    done = events[-1]
    assert done.transcript.strip() and done.usage.seconds == pytest.approx(3.44, abs=0.1)
    deltas = [e.delta for e in events if e.type == "conversation.item.input_audio_transcription.delta"]
    assert "".join(deltas) == done.transcript


def test_an_english_only_export_has_no_language_or_task_tokens(tmp_path):
    """A `.en` export (is_multilingual false, no lang_to_id): the prompt is <|startoftranscript|>
    (+ <|notimestamps|>), English only, no translation, and discovery shows no translate."""
    from inferd.errors import CapabilityMissing, InvalidInput
    from inferd.registry.discovery import make_spec
    from inferd.runtimes.speech import load_whisper_onnx

    folder = layout(tmp_path / "en", SPLIT)
    gen = json.loads((folder / "generation_config.json").read_text())
    gen.update(is_multilingual=False, lang_to_id={}, task_to_id={})
    (folder / "generation_config.json").write_text(json.dumps(gen))
    rt = load_whisper_onnx(folder, threads=1, name="en")
    assert rt.prompt("en", DecodeOptions(timestamps=False)) == [rt.sot, rt.no_ts]
    with pytest.raises(CapabilityMissing):
        rt.check(DecodeOptions(task="translate"), None)
    with pytest.raises(InvalidInput):
        rt.check(DecodeOptions(), "de")
    res = rt.decode_batch([Chunk(clip("fox.wav"), 0.0, None)], CASES["transcribe"][1])[0]
    assert res.language == "en" and res.language_probability == 1.0 and len(res.tokens) == 64
    spec = make_spec("en", folder, "cli")
    assert "translate" not in spec.capabilities and "language_detection" not in spec.capabilities


@pytest.mark.parametrize("timestamps", [False, True])
def test_logprob_noted_while_decoding_equals_a_rescoring_pass(runtime, timestamps):
    """Greedy notes each token's logprob as it decodes; beam search rescoring its tokens in one
    pass must give the same number for the same tokens (avg_logprob, the fallback's measure)."""
    opts = DecodeOptions(beam_size=1, temperatures=(0.0,), timestamps=timestamps)
    prompt = runtime.prompt("en", opts)
    dec = runtime.decoder(runtime.encode([clip("call.wav")]))
    (tokens, noted), = runtime.generate(dec, prompt, [0], opts, 0.0)
    assert len(tokens) == 64 and noted < 0
    assert runtime.score(dec, prompt, 0, tokens, timestamps) == pytest.approx(noted, rel=1e-4)


def test_languages_come_from_the_tokenizer_when_the_config_lacks_them(tmp_path):
    """Older exports' generation_config.json has no lang_to_id/task_to_id: the language tokens
    are read from the vocabulary, and decoding is unchanged."""
    from inferd.runtimes.speech import load_whisper_onnx

    folder = layout(tmp_path / "old", MERGED)
    gen = json.loads((folder / "generation_config.json").read_text())
    full = load_whisper_onnx(WONNX, threads=1)
    del gen["lang_to_id"], gen["task_to_id"]
    (folder / "generation_config.json").write_text(json.dumps(gen))
    rt = load_whisper_onnx(folder, threads=1)
    assert rt.lang_ids == full.lang_ids and rt.task_ids == full.task_ids and rt.multilingual
    res = rt.decode_batch([Chunk(clip("fox.wav"), 0.0, None)], CASES["translate"][1])[0]
    assert res.tokens == CLIPREF["fox.wav"]["translate"]["tokens"]
    from inferd.registry.discovery import make_spec

    assert "translate" in make_spec("old", folder, "cli").capabilities
