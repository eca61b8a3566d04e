"""Make the tiny random-weight Whisper ONNX fixture (optimum's layout) and its reference outputs
(needs torch; run in the fixture venv, never at test time):

    /work/fixture-venv/bin/pip install --no-deps optimum==2.3.0 optimum-onnx==0.1.0   # merge_decoders
    /work/fixture-venv/bin/python scripts/make_tiny_whisper.py

(fixture venv: torch==2.13.0, transformers==5.24.0, onnx==1.23.2, tokenizers==0.23.3.)

Writes tests/fixtures/speech/whisper-onnx-tiny/:
- a multilingual WhisperForConditionalGeneration with random weights (d_model 64, 2+2 layers,
  80 mel bins, 448 target positions) and a Whisper-style byte-level tokenizer.json (256 byte
  tokens, then <|endoftext|>, <|startoftranscript|>, 8 language tokens, <|translate|>,
  <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|> and the 1,501
  timestamp tokens <|0.00|> .. <|30.00|>, so timestamp_begin = notimestamps + 1 as in Whisper);
- encoder_model.onnx, decoder_model.onnx, decoder_with_past_model.onnx (torch.onnx.export) and
  decoder_model_merged.onnx (optimum's merge_decoders of the two), config.json,
  generation_config.json, preprocessor_config.json;
- reference.json: per clip, transformers' detected language and WhisperForConditionalGeneration
  .generate token ids (greedy transcribe, translate, with timestamps, with a prompt; 3 beams),
  computed on WhisperFeatureExtractor's features; mel.npz: the extractor's log-mel of fox.wav.
"""

from __future__ import annotations

import json
import shutil
import wave
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "speech" / "whisper-onnx-tiny"
CLIPS = ROOT / "tests" / "fixtures" / "speech" / "clips"
REF_CLIPS = ["fox.wav", "call.wav"]
LANGS = ["en", "zh", "de", "es", "ru", "ko", "fr", "ja"]
SEED = 4321
N_LAYERS = 2
PROMPT = "quick brown fox"
# generation_config.max_length (Whisper's is 448): the random model never stops on its own, and
# the runtime must stop where transformers does
MAX_LENGTH = 64


def audio(name: str) -> np.ndarray:
    """16-bit PCM mono 16 kHz, /32768 as inferd's decoder (and faster-whisper's) scale it."""
    with wave.open(str(CLIPS / name)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768.0


def bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tokenizer(folder: Path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    chars = bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{c}|>" for c in LANGS], "<|translate|>",
                "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    # Whisper's tokenizer.json carries the timestamps as added (non-special) tokens
    tok.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", special=False, normalized=False) for i in range(1501)])
    tok.save(str(folder / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in specials}
    assert ids["<|endoftext|>"] == 256 and tok.token_to_id("<|0.00|>") == ids["<|notimestamps|>"] + 1
    return tok, ids


class Enc(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_features):
        return self.m.model.encoder(input_features=input_features).last_hidden_state


class Dec(torch.nn.Module):
    """decoder_model.onnx: the prompt -> logits and the whole cache."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, encoder_hidden_states):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        out = self.m.model.decoder(input_ids=input_ids, encoder_hidden_states=encoder_hidden_states,
                                   past_key_values=cache, use_cache=True, return_dict=True)
        c = out.past_key_values
        flat = []
        for i in range(N_LAYERS):
            s, x = c.self_attention_cache.layers[i], c.cross_attention_cache.layers[i]
            flat += [s.keys, s.values, x.keys, x.values]
        return (self.m.proj_out(out.last_hidden_state), *flat)


class DecPast(torch.nn.Module):
    """decoder_with_past_model.onnx: one more token given the cache -> logits, new self cache
    (the cross cache is an input only: its projections are not in this graph)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, encoder_hidden_states, *pkv):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        self_c = DynamicCache([(pkv[4 * i], pkv[4 * i + 1]) for i in range(N_LAYERS)])
        cross = DynamicCache([(pkv[4 * i + 2], pkv[4 * i + 3]) for i in range(N_LAYERS)])
        cache = EncoderDecoderCache(self_c, cross)
        out = self.m.model.decoder(input_ids=input_ids, encoder_hidden_states=encoder_hidden_states,
                                   past_key_values=cache, use_cache=True, return_dict=True)
        c = out.past_key_values
        flat = []
        for i in range(N_LAYERS):
            s = c.self_attention_cache.layers[i]
            flat += [s.keys, s.values]
        return (self.m.proj_out(out.last_hidden_state), *flat)


def export(module, args, path: Path, inputs, outputs, dynamic) -> None:
    module.eval()
    torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=dynamic,
                      opset_version=17, dynamo=False, do_constant_folding=True)


def export_all(model, feats: torch.Tensor, out: Path) -> None:
    enc = Enc(model)
    export(enc, (feats,), out / "encoder_model.onnx", ["input_features"], ["last_hidden_state"],
           {"input_features": {0: "batch_size"}, "last_hidden_state": {0: "batch_size"}})
    with torch.no_grad():
        hidden = enc(feats)
    ids = torch.tensor([[257, 258, 267, 270]] * feats.shape[0])
    pkv = []
    for i in range(N_LAYERS):
        pkv += [f"present.{i}.decoder.key", f"present.{i}.decoder.value",
                f"present.{i}.encoder.key", f"present.{i}.encoder.value"]
    dyn = {"input_ids": {0: "batch_size", 1: "decoder_sequence_length"}, "encoder_hidden_states": {0: "batch_size"},
           "logits": {0: "batch_size", 1: "decoder_sequence_length"}}
    dyn.update({n: {0: "batch_size", 2: "decoder_sequence_length" if "decoder" in n else "encoder_sequence_length_out"}
                for n in pkv})
    export(Dec(model), (ids, hidden), out / "decoder_model.onnx", ["input_ids", "encoder_hidden_states"],
           ["logits", *pkv], dyn)
    with torch.no_grad():
        first = Dec(model)(ids, hidden)
    past_in = [n.replace("present.", "past_key_values.") for n in pkv]
    present_out = [n for n in pkv if "decoder" in n]
    dyn = {"input_ids": {0: "batch_size"}, "encoder_hidden_states": {0: "batch_size"}, "logits": {0: "batch_size"}}
    dyn.update({n: {0: "batch_size", 2: "past_decoder_sequence_length" if "decoder" in n
                    else "encoder_sequence_length_out"} for n in past_in})
    dyn.update({n: {0: "batch_size", 2: "past_decoder_sequence_length + 1"} for n in present_out})
    export(DecPast(model), (ids[:, -1:], hidden, *first[1:]), out / "decoder_with_past_model.onnx",
           ["input_ids", "encoder_hidden_states", *past_in], ["logits", *present_out], dyn)
    from optimum.onnx import merge_decoders

    merge_decoders(out / "decoder_model.onnx", out / "decoder_with_past_model.onnx", strict=False,
                   save_path=out / "decoder_model_merged.onnx")
    share_weights(out, ["decoder_model.onnx", "decoder_with_past_model.onnx", "decoder_model_merged.onnx"],
                  "decoder_weights.bin", model.model.decoder.embed_tokens.weight.detach().numpy())


def share_weights(out: Path, graphs: list[str], blob_name: str, embed: np.ndarray) -> None:
    """Keep the fixture small: the three decoder graphs hold the same weights, so they are
    stored once, in one ONNX external-data file the graphs point into (offset, length), and the
    tied output projection (which the exporter folds into a transposed copy of the embedding)
    becomes a Transpose of the embedding. onnxruntime reads external data relative to the graph."""
    import hashlib

    import onnx
    from onnx import helper, numpy_helper
    from onnx.external_data_helper import _get_all_tensors

    emb_t = np.ascontiguousarray(embed.T).astype(np.float32).tobytes()
    emb_b = np.ascontiguousarray(embed).astype(np.float32).tobytes()
    blob = bytearray()
    where: dict[bytes, tuple[int, int]] = {}
    for g in graphs:
        m = onnx.load(str(out / g))
        emb_name = next(i.name for i in m.graph.initializer if numpy_helper.to_array(i).tobytes() == emb_b)
        tied = [i for i in m.graph.initializer if numpy_helper.to_array(i).tobytes() == emb_t]
        for t in tied:  # proj_out = embed_tokens.T, computed instead of stored
            m.graph.initializer.remove(t)
            m.graph.node.insert(0, helper.make_node("Transpose", [emb_name], [t.name], perm=[1, 0],
                                                    name=f"tied_{t.name}"))
        for t in _get_all_tensors(m):
            if not t.HasField("raw_data"):
                if np.prod(t.dims) < 256:
                    continue
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
            data = t.raw_data
            if len(data) < 1024:
                continue
            key = hashlib.sha256(bytes([t.data_type]) + data).digest()
            if key not in where:
                blob.extend(b"\0" * (-len(blob) % 64))
                where[key] = (len(blob), len(data))
                blob.extend(data)
            off, n = where[key]
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
            del t.external_data[:]
            for k, v in (("location", blob_name), ("offset", str(off)), ("length", str(n))):
                e = t.external_data.add()
                e.key, e.value = k, v
        onnx.save_model(m, str(out / g))
    (out / blob_name).write_bytes(bytes(blob))


def main() -> None:
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    tok, ids = tokenizer(OUT)
    eot, sot, no_ts = ids["<|endoftext|>"], ids["<|startoftranscript|>"], ids["<|notimestamps|>"]
    vocab_size = no_ts + 1 + 1501
    chars = bytes_to_unicode()
    space = tok.token_to_id(chars[ord(" ")])
    # Whisper's suppress lists name symbols and the specials that never start text
    suppress = sorted({tok.token_to_id(chars[b]) for b in b'"#()*+/:;<=>@[\\]^_`{|}~'}
                      | {ids[t] for t in ("<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
                                          "<|nospeech|>", "<|startoftranscript|>")})
    cfg = WhisperConfig(vocab_size=vocab_size, num_mel_bins=80, d_model=64, encoder_layers=N_LAYERS,
                        decoder_layers=N_LAYERS, encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=1500,
                        max_target_positions=448, pad_token_id=eot, bos_token_id=eot, eos_token_id=eot,
                        decoder_start_token_id=sot, suppress_tokens=suppress, begin_suppress_tokens=[space, eot],
                        init_std=0.2, architectures=["WhisperForConditionalGeneration"])
    torch.manual_seed(SEED)
    model = WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        emb = model.model.decoder.embed_tokens.weight  # tied to proj_out
        keep = {tok.token_to_id(chars[b]) for b in b"abcdefghijklmnopqrstuvwxyz "}
        for b in range(256):  # readable random text: lowercase letters and spaces win
            if b not in keep:
                emb[b] *= 0.3
        emb[eot + 1:no_ts + 1] *= 0.3   # languages and tasks
        emb[no_ts + 1:] *= 0.25         # timestamps: some, not everywhere
        emb[eot] *= 2.5          # it ends: a few dozen tokens, not 448
    gen = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
        suppress_tokens=suppress, begin_suppress_tokens=[space, eot], no_timestamps_token_id=no_ts,
        lang_to_id={f"<|{c}|>": ids[f"<|{c}|>"] for c in LANGS},
        task_to_id={"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]},
        is_multilingual=True, max_length=MAX_LENGTH, max_initial_timestamp_index=50, forced_decoder_ids=None,
        prev_sot_token_id=ids["<|startofprev|>"])
    model.generation_config = gen
    model.config.save_pretrained(OUT)
    gen.save_pretrained(OUT)
    fe = WhisperFeatureExtractor(feature_size=80)
    fe.save_pretrained(OUT)

    def feats_of(name: str) -> torch.Tensor:
        return fe(audio(name), sampling_rate=16000, return_tensors="pt").input_features

    np.savez_compressed(OUT / "mel.npz", clip=np.array("fox.wav"), mel=feats_of("fox.wav")[0].numpy())
    export_all(model, torch.cat([feats_of(n) for n in REF_CLIPS]), OUT)

    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    prompt_ids = torch.tensor([ids["<|startofprev|>"], *tok.encode(" " + PROMPT, add_special_tokens=False).ids])
    ref: dict = {"prompt": PROMPT, "clips": {}}
    for name in REF_CLIPS:
        f = feats_of(name)
        with torch.no_grad():
            lang_id = int(model.detect_language(f)[0])
            lang = tok.id_to_token(lang_id)[2:-2]
            cases = {
                "transcribe": dict(task="transcribe"),
                "translate": dict(task="translate"),
                "prompt": dict(task="transcribe", prompt_ids=prompt_ids),
                "beam3": dict(task="transcribe", num_beams=3),
                "german": dict(task="transcribe", language="de"),
            }
            item: dict = {"language": lang}
            for case, kw in cases.items():
                seq = model.generate(f, do_sample=False, **kw)
                seq = seq[0] if not hasattr(seq, "sequences") else seq.sequences[0]
                full = [int(t) for t in seq]
                # the generated tokens: after <|notimestamps|> (or the task token with timestamps),
                # where generate returns the prompt too
                begin = full.index(sot) + (3 if kw.get("return_timestamps") else 4) if sot in full else 0
                tokens = full[begin:]
                if tokens and tokens[-1] == eot:
                    tokens = tokens[:-1]
                item[case] = {"tokens": tokens, "text": fast.decode([t for t in tokens if t < eot])}
            # With timestamps, WhisperForConditionalGeneration.generate re-decodes from the last
            # timestamp pair (its seek loop); inferd decodes a window once, so the reference is
            # one generate pass with the processors Whisper's generate builds, in its order.
            from transformers import GenerationMixin
            from transformers.generation.logits_process import (LogitsProcessorList, SuppressTokensAtBeginLogitsProcessor,
                                                                SuppressTokensLogitsProcessor, WhisperTimeStampLogitsProcessor)

            prompt = [sot, lang_id, ids["<|transcribe|>"]]
            procs = LogitsProcessorList([SuppressTokensAtBeginLogitsProcessor([space, eot], len(prompt)),
                                         SuppressTokensLogitsProcessor(suppress),
                                         WhisperTimeStampLogitsProcessor(gen, begin_index=len(prompt))])
            bare = GenerationConfig.from_dict({**gen.to_dict(), "suppress_tokens": None, "begin_suppress_tokens": None})
            seq = GenerationMixin.generate(model, input_features=f, decoder_input_ids=torch.tensor([prompt]),
                                           logits_processor=procs, generation_config=bare, do_sample=False, num_beams=1,
                                           max_new_tokens=MAX_LENGTH)
            tokens = [int(t) for t in seq[0][len(prompt):]]
            if tokens and tokens[-1] == eot:
                tokens = tokens[:-1]
            item["timestamps"] = {"tokens": tokens, "text": fast.decode([t for t in tokens if t < eot])}
            ref["clips"][name] = item
            print(name, lang, {k: len(v["tokens"]) for k, v in item.items() if k != "language"})
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{OUT}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    import os
    import sys

    # optimum's merge_decoders names the initializers it shares in set order: a fixed hash
    # seed makes the merged graph the same bytes on every run
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    torch.set_num_threads(1)
    main()
