"""Make the tiny random-weight speech fixtures and their reference outputs (needs torch; run
in a separate venv, never at test time):

    python -m venv /tmp/fix && /tmp/fix/bin/pip install torch==2.13.0 transformers ctranslate2 \\
        faster-whisper onnx onnxruntime
    /tmp/fix/bin/python scripts/make_tiny_speech.py

Writes tests/fixtures/speech/:
- whisper-tiny-random/  a 2+2-layer multilingual WhisperForConditionalGeneration with random
  weights and Whisper's vocabulary layout (51,865 tokens: 256 byte-level tokens and letter-string
  fillers, then Whisper's special tokens, 99 language tokens and 1,501 timestamps), width 16,
  converted to CTranslate2 by ctranslate2's own transformers converter (float16). reference.json: transformers' greedy `generate` on the
  clips' features (the log-mel frames faster-whisper computes, padded the way it pads them,
  so both sides see the same input): detected language, and token ids for transcribe (auto
  language) and translate.
- wav2vec2-tiny-random/  a tiny Wav2Vec2ForCTC (7 feature convolutions like the real model,
  so 20 ms frames; 2 layers of width 32; the English character vocabulary of
  wav2vec2-base-960h), exported to ONNX with its vocab.json, preprocessor_config.json and
  config.json. reference.json: transformers' logits and greedy CTC tokens and text per clip.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "speech"
CLIPS = OUT / "clips"
REF_CLIPS = ["fox.wav", "call.wav", "walk.flac"]
SEED = 1234

W2V_VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "|", "E", "T", "A", "O", "N", "I", "H", "S", "R", "D", "L", "U",
             "M", "W", "C", "F", "G", "Y", "P", "B", "V", "K", "'", "X", "J", "Q", "Z"]


def audio(name: str) -> np.ndarray:
    from faster_whisper import decode_audio

    return decode_audio(str(CLIPS / name), sampling_rate=16000)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (what the ByteLevel pre-tokenizer emits)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# ---- Whisper ---------------------------------------------------------------------------------
def whisper_tokenizer(folder: Path):
    """A byte-level tokenizer laid out like Whisper's: text tokens, then <|endoftext|>, the
    start token, languages, tasks and the rest, so every id rule faster-whisper and
    CTranslate2 apply (text < eot, timestamp_begin = notimestamps + 1) holds."""
    from faster_whisper.tokenizer import _LANGUAGE_CODES
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import WhisperTokenizerFast

    byte_chars = bytes_to_unicode()
    vocab = {byte_chars[b]: b for b in range(256)}
    # CTranslate2 takes a Whisper model for multilingual only with the full vocabulary size
    # (51,865+), so the text part is filled up to Whisper's 50,257 with letter strings (only
    # ever decoded, never produced by encoding: the tokenizer has no merges).
    # CTranslate2 (4.8) tells a multilingual vocabulary by its empty-string token, which
    # Whisper's multilingual BPE has and the English one lacks.
    vocab[""] = len(vocab)
    letters = "abcdefghijklmnopqrstuvwxyz"
    fill = (a + b + c + d for a in letters for b in letters for c in letters for d in ["", *letters])
    while len(vocab) < 50257:
        vocab.setdefault(next(fill), len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # 99 languages, as whisper-tiny: CTranslate2 takes exactly 51,865 tokens for multilingual.
    codes = [c for c in _LANGUAGE_CODES if c != "yue"]
    specials = ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{c}|>" for c in codes],
                "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
                "<|notimestamps|>"]
    hf = WhisperTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                              unk_token="<|endoftext|>", pad_token="<|endoftext|>",
                              additional_special_tokens=specials[1:])
    hf.add_special_tokens({"additional_special_tokens": specials[1:]})
    hf.save_pretrained(folder)
    ids = {t: hf.convert_tokens_to_ids(t) for t in specials}
    assert ids["<|endoftext|>"] == 50257 and ids["<|notimestamps|>"] == 50257 + len(specials) - 1, ids
    return hf, ids, codes


def make_whisper() -> None:
    import ctranslate2
    from faster_whisper.feature_extractor import FeatureExtractor
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer as FwTokenizer
    from faster_whisper.transcribe import get_suppressed_tokens
    from tokenizers import Tokenizer
    from transformers import GenerationConfig, GenerationMixin, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    out = OUT / "whisper-tiny-random"
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / "hf"
        hf_dir.mkdir()
        hf_tok, ids, langs = whisper_tokenizer(hf_dir)
        eot, sot, no_ts = ids["<|endoftext|>"], ids["<|startoftranscript|>"], ids["<|notimestamps|>"]
        vocab_size = no_ts + 1 + 1501
        fw_tok = FwTokenizer(Tokenizer.from_file(str(hf_dir / "tokenizer.json")), True, "transcribe", "en")
        suppress = list(get_suppressed_tokens(fw_tok, [-1]))  # what faster-whisper passes to generate
        blank = hf_tok.encode(" ", add_special_tokens=False)
        cfg = WhisperConfig(vocab_size=vocab_size, num_mel_bins=80, d_model=16, encoder_layers=2, decoder_layers=2,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                            decoder_ffn_dim=32, max_source_positions=1500, max_target_positions=448,
                            pad_token_id=eot, bos_token_id=eot, eos_token_id=eot, decoder_start_token_id=sot,
                            suppress_tokens=suppress, begin_suppress_tokens=[*blank, eot],
                            init_std=0.2)  # larger than the default 0.02: wide logit margins, stable argmax
        torch.manual_seed(SEED)
        model = WhisperForConditionalGeneration(cfg).eval()
        with torch.no_grad():  # shrink the timestamp rows (proj_out is tied to them): text tokens win
            model.model.decoder.embed_tokens.weight[no_ts + 1:] *= 0.05
            # and the bytes that are not lowercase letters or a space: the random text is readable
            chars = bytes_to_unicode()
            keep = {hf_tok.convert_tokens_to_ids(chars[b]) for b in b"abcdefghijklmnopqrstuvwxyz "}
            model.model.decoder.embed_tokens.weight[eot + 1:no_ts + 1] *= 0.3  # languages and tasks
            for b in range(256):
                if b not in keep:
                    model.model.decoder.embed_tokens.weight[b] *= 0.3
            model.model.decoder.embed_tokens.weight[256:eot] *= 0.6
        # Stored as float16 (half the size); the reference runs on the same rounded weights.
        model = model.half().float()
        gen = GenerationConfig(
            decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
            suppress_tokens=suppress, begin_suppress_tokens=[*blank, eot], no_timestamps_token_id=no_ts,
            lang_to_id={f"<|{c}|>": ids[f"<|{c}|>"] for c in langs},
            task_to_id={"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]},
            is_multilingual=True, max_length=448, max_initial_timestamp_index=50,
            alignment_heads=[[1, 0], [1, 1]], forced_decoder_ids=None)
        model.generation_config = gen
        model.save_pretrained(hf_dir)
        WhisperFeatureExtractor(feature_size=80).save_pretrained(hf_dir)
        if out.exists():
            shutil.rmtree(out)
        ctranslate2.converters.TransformersConverter(
            str(hf_dir), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(str(out), quantization="float16")

        fe = FeatureExtractor(feature_size=80)
        ref: dict = {"clips": {}, "max_length": 448, "suppress_tokens": suppress}
        for name in REF_CLIPS:
            f = fe(audio(name))
            n = min(fe.nb_max_frames, f.shape[-1] - 1)
            feats = torch.from_numpy(np.ascontiguousarray(pad_or_trim(f[:, :n]))[None].astype(np.float32))
            with torch.no_grad():
                lang_id = int(model.detect_language(feats)[0])
                lang = hf_tok.convert_ids_to_tokens(lang_id)[2:-2]
                item = {"language": lang}
                for task in ("transcribe", "translate"):
                    prompt = [sot, ids[f"<|{lang}|>"], ids[f"<|{task}|>"], no_ts]
                    # GenerationMixin.generate: plain greedy decoding with the generation config's
                    # suppress lists, without Whisper's seek loop around it (which re-decodes after
                    # timestamp tokens, something a random model emits anywhere).
                    seq = GenerationMixin.generate(model, input_features=feats, decoder_input_ids=torch.tensor([prompt]),
                                                   do_sample=False, num_beams=1, max_new_tokens=224)  # CTranslate2: at most max_length / 2 new tokens
                    tokens = [int(t) for t in seq[0][len(prompt):]]
                    if tokens and tokens[-1] == eot:
                        tokens = tokens[:-1]
                    item[task] = {"tokens": tokens, "text": hf_tok.decode([t for t in tokens if t < eot])}
            ref["clips"][name] = item
            print("whisper", name, lang, len(item["transcribe"]["tokens"]), len(item["translate"]["tokens"]))
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")


# ---- Wav2Vec2 CTC ----------------------------------------------------------------------------
def make_wav2vec2() -> None:
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC

    out = OUT / "wav2vec2-tiny-random"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = Wav2Vec2Config(vocab_size=len(W2V_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, conv_dim=(32,) * 7, num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=2, feat_extract_norm="layer", do_stable_layer_norm=True,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=0.2,
                         architectures=["Wav2Vec2ForCTC"])
    torch.manual_seed(SEED)
    model = Wav2Vec2ForCTC(cfg).eval()
    cfg.save_pretrained(out)
    fx = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                  return_attention_mask=True)
    fx.save_pretrained(out)
    (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(W2V_VOCAB)}, indent=1) + "\n")

    x = torch.zeros(2, 16000)
    m = torch.ones(2, 16000, dtype=torch.int64)
    torch.onnx.export(model, (x, m), str(out / "model.onnx"), input_names=["input_values", "attention_mask"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_values": {0: "batch", 1: "samples"},
                                    "attention_mask": {0: "batch", 1: "samples"},
                                    "logits": {0: "batch", 1: "frames"}})
    ref: dict = {"clips": {}}
    for name in REF_CLIPS:
        inp = fx(audio(name), sampling_rate=16000, return_tensors="pt")
        with torch.no_grad():
            logits = model(inp.input_values, attention_mask=inp.attention_mask).logits[0].numpy()
        ids = logits.argmax(-1)
        tokens, prev = [], None
        for t in ids.tolist():
            if t != prev and t != 0:
                tokens.append(int(t))
            prev = t
        text = "".join(W2V_VOCAB[t] for t in tokens if t > 4 or t == 4).replace("|", " ")
        ref["clips"][name] = {"tokens": tokens, "text": " ".join(text.split()),
                              "logits": np.round(logits, 5).tolist()}
        print("wav2vec2", name, logits.shape, len(tokens))
    (out / "reference.json").write_text(json.dumps(ref) + "\n")


if __name__ == "__main__":
    import sys

    if "--wav2vec2-only" not in sys.argv:
        make_whisper()
    if "--whisper-only" not in sys.argv:
        make_wav2vec2()
