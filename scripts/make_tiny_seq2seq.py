"""Tiny random-weight seq2seq rewriters (T5 and BART) in every layout inferd serves, with
reference outputs from transformers `generate`.

Run with the fixture venv (torch + transformers + ctranslate2 live only there, never in inferd):
    /work/fixture-venv/bin/python scripts/make_tiny_seq2seq.py [OUTDIR]
Writes OUTDIR (default tests/fixtures/seq2seq)/:

  tiny-t5-antfly/      encoder.onnx, decoder-init.onnx, decoder.onnx (Antfly layout; own I/O names)
  tiny-t5-optimum/     encoder_model.onnx, decoder_model.onnx, decoder_with_past_model.onnx
  tiny-t5-merged/      encoder_model.onnx, decoder_model_merged.onnx (use_cache_branch)
  tiny-t5-ct2/         model.bin + shared_vocabulary.json (CTranslate2 TransformersConverter)
  tiny-bart-antfly/, tiny-bart-optimum/, tiny-bart-merged/   the same for BART
  reference-t5.json, reference-bart.json   what transformers generates (token ids and texts)

`--bench DIR` writes instead a random T5 of t5-small's size (512 wide, 6+6 layers, 32,128
vocabulary padded with placeholder tokens) in optimum's layout and in CTranslate2's, for
bench/rewrite.py (not a test fixture: about 240 MB, never committed).

Each ONNX folder has tokenizer.json, config.json and generation_config.json. The BART one
uses forced BOS/EOS, no_repeat_ngram_size 3 and length_penalty 2.0, like summarisers do. The
references are computed per input, each alone (greedy, beam 4 with 2 returned, and greedy
with max_new_tokens 5); every exported layout is checked against them here before writing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"  # tokenizer training is deterministic on one thread only
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import helper
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (BartConfig, BartForConditionalGeneration, GenerationConfig, T5Config,
                          T5ForConditionalGeneration)
from transformers.cache_utils import EncoderDecoderCache

CORPUS = [
    "generate question: <hl> Lisbon <hl> is the capital of Portugal.",
    "the quick brown fox jumps over the lazy dog", "a local inference server answers requests",
    "rain falls from clouds when water vapour condenses", "bake the bread for forty minutes",
    "translate English to German: the house is wonderful", "paraphrase: batching raises throughput",
    "summarize: seq2seq models encode a source text and decode a target text one token at a time",
    "generate question: <hl> forty minutes <hl> bake the bread for forty minutes",
    "what causes rain? why is the sky blue? where is the capital of France?",
] * 4
INPUTS = ["generate question: <hl> Lisbon <hl> is the capital of Portugal.",
          "the quick brown fox", "paraphrase: batching raises throughput",
          "summarize: rain falls from clouds when water vapour condenses and the bread bakes"]
MAX_INPUT = 48


def t5_tokenizer(path: Path) -> Tokenizer:
    """A SentencePiece-style Unigram vocabulary built by hand (the Unigram trainer is not
    deterministic): specials, corpus words, their halves, and single characters."""
    words = sorted({w for line in CORPUS for w in line.split()})
    halves = sorted({h for w in words if len(w) > 3 for h in ("\u2581" + w[: len(w) // 2], w[len(w) // 2:])})
    chars = sorted(set("".join(CORPUS)) | set("abcdefghijklmnopqrstuvwxyz0123456789"))
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("<hl>", 0.0), ("\u2581", -3.0)]
    pieces += [("\u2581" + w, -2.0 - 0.01 * i) for i, w in enumerate(words[:60])]
    pieces += [(h, -4.0 - 0.01 * i) for i, h in enumerate(halves[:40])]
    pieces += [(c, -8.0) for c in chars]
    seen: dict[str, float] = {}
    for p, sc in pieces:
        seen.setdefault(p, sc)
    tok = Tokenizer(models.Unigram(list(seen.items()), unk_id=2))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.add_special_tokens(["<pad>", "</s>", "<unk>", "<hl>"])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    tok.enable_truncation(MAX_INPUT)
    tok.save(str(path))
    return tok


def bart_tokenizer(path: Path) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=330, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<hl>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.enable_truncation(MAX_INPUT)
    tok.save(str(path))
    return tok


def t5_model(vocab: int) -> tuple[T5ForConditionalGeneration, GenerationConfig]:
    cfg = T5Config(vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                   relative_attention_num_buckets=8, relative_attention_max_distance=32, dropout_rate=0.0,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, initializer_factor=4.0,
                   tie_word_embeddings=False, attn_implementation="eager")
    m = T5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # make </s> likely enough that generations end at different lengths
        m.lm_head.weight[1] *= 3.0
    gen = GenerationConfig(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0, max_length=16)
    return m, gen


def bart_model(vocab: int) -> tuple[BartForConditionalGeneration, GenerationConfig]:
    cfg = BartConfig(vocab_size=vocab, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                     dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, init_std=0.2, bos_token_id=0,
                     pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=0,
                     forced_eos_token_id=2, scale_embedding=False, attn_implementation="eager")
    m = BartForConditionalGeneration(cfg).eval()
    gen = GenerationConfig(decoder_start_token_id=2, bos_token_id=0, eos_token_id=2, pad_token_id=1, max_length=18,
                           forced_bos_token_id=0, forced_eos_token_id=2, no_repeat_ngram_size=3, length_penalty=2.0,
                           num_beams=1, early_stopping=False)
    return m, gen


# ---- export ------------------------------------------------------------------------------------


def _flat(cache: EncoderDecoderCache, n_layers: int, cross: bool = True) -> list[torch.Tensor]:
    out = []
    for i in range(n_layers):
        s = cache.self_attention_cache.layers[i]
        out += [s.keys, s.values]
        if cross:
            c = cache.cross_attention_cache.layers[i]
            out += [c.keys, c.values]
    return out


class Encoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class DecoderInit(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m, self.n = m, m.config.num_decoder_layers if hasattr(m.config, "num_decoder_layers") else m.config.decoder_layers

    def forward(self, input_ids, encoder_attention_mask, encoder_hidden_states):
        out = self.m(decoder_input_ids=input_ids, encoder_outputs=(encoder_hidden_states,),
                     attention_mask=encoder_attention_mask, use_cache=True)
        return (out.logits, *_flat(out.cache, self.n))


class DecoderWithPast(DecoderInit):
    def forward(self, input_ids, encoder_attention_mask, *past):
        layers = [tuple(past[4 * i:4 * i + 4]) for i in range(self.n)]
        cache = EncoderDecoderCache(layers)
        b, s = past[2].shape[0], past[2].shape[2]
        ehs = torch.zeros(b, s, self.m.config.d_model)  # unused: the cross-attention K/V come from the cache
        out = self.m(decoder_input_ids=input_ids, encoder_outputs=(ehs,), attention_mask=encoder_attention_mask,
                     cache=cache, use_cache=True)
        return (out.logits, *_flat(out.cache, self.n, cross=False))


def past_names(n: int, style: str, prefix: str) -> list[str]:
    """optimum: past_key_values.0.decoder.key ... ; antfly fixture: past.0.self_key ... (own names on
    purpose: inferd reads them from the graphs)."""
    out = []
    for i in range(n):
        for part in ("decoder.key", "decoder.value", "encoder.key", "encoder.value"):
            if style == "optimum":
                out.append(f"{prefix}.{i}.{part}")
            else:
                kind, kv = part.split(".")
                out.append(f"{prefix}.{i}.{'self' if kind == 'decoder' else 'cross'}_{kv}")
    return out


def export_all(m, n_layers: int, out: Path, style: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    past_in = "past_key_values" if style == "optimum" else "past"
    names = {"enc": "encoder_model.onnx", "init": "decoder_model.onnx", "past": "decoder_with_past_model.onnx"}
    if style == "antfly":
        names = {"enc": "encoder.onnx", "init": "decoder-init.onnx", "past": "decoder.onnx"}
    enc_out = "last_hidden_state" if style == "optimum" else "hidden_states"
    ids = torch.tensor([[5, 6, 7, 8, 1], [5, 6, 1, 0, 0]])
    mask = (torch.arange(5)[None] < torch.tensor([[5], [3]])).long()
    dyn = lambda *axes: {i: a for i, a in enumerate(axes)}  # noqa: E731
    torch.onnx.export(Encoder(m), (ids, mask), str(out / names["enc"]), input_names=["input_ids", "attention_mask"],
                      output_names=[enc_out], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": dyn("b", "s"), "attention_mask": dyn("b", "s"), enc_out: dyn("b", "s")})
    with torch.no_grad():
        hs = Encoder(m)(ids, mask)
    dec_ids = torch.tensor([[0], [0]])
    presents = past_names(n_layers, style, "present")
    pk = {n: dyn("b", "h", "past" if ("decoder" in n or "self" in n) else "s") for n in presents}
    torch.onnx.export(DecoderInit(m), (dec_ids, mask, hs), str(out / names["init"]),
                      input_names=["input_ids", "encoder_attention_mask", "encoder_hidden_states"],
                      output_names=["logits", *presents], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": dyn("b", "t"), "encoder_attention_mask": dyn("b", "s"),
                                    "encoder_hidden_states": dyn("b", "s"), "logits": dyn("b", "t"), **pk})
    with torch.no_grad():
        past = DecoderInit(m)(dec_ids, mask, hs)[1:]
    pasts = past_names(n_layers, style, past_in)
    self_presents = [p for p in presents if "decoder" in p or "self" in p]
    torch.onnx.export(DecoderWithPast(m), (dec_ids, mask, *past), str(out / names["past"]),
                      input_names=["input_ids", "encoder_attention_mask", *pasts],
                      output_names=["logits", *self_presents], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": dyn("b", "t"), "encoder_attention_mask": dyn("b", "s"),
                                    "logits": dyn("b", "t"),
                                    **{n: dyn("b", "h", "past" if ("decoder" in n or "self" in n) else "s")
                                       for n in pasts},
                                    **{n: dyn("b", "h", "past1") for n in self_presents}})
    return {k: out / v for k, v in names.items()}


def _prefixed(graph: onnx.GraphProto, prefix: str, outer: set[str]) -> tuple[list, list, list]:
    """Nodes and initializers of `graph` with every internal name prefixed (outer inputs kept)."""
    ren = lambda n: n if (n in outer or n == "") else prefix + n  # noqa: E731
    nodes = []
    for node in graph.node:
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = prefix + node.name
        new.input[:] = [ren(i) for i in node.input]
        new.output[:] = [ren(o) for o in node.output]
        nodes.append(new)
    inits = []
    for t in graph.initializer:
        new = onnx.TensorProto()
        new.CopyFrom(t)
        new.name = prefix + t.name
        inits.append(new)
    return nodes, inits, [ren(o.name) for o in graph.output]


def merge(init_path: Path, past_path: Path, out_path: Path, n_layers: int) -> None:
    """optimum's decoder_model_merged.onnx: one graph, an If on `use_cache_branch` choosing the
    no-past body (first step) or the with-past body (cross K/V passed through)."""
    g0, g1 = onnx.load(str(init_path)).graph, onnx.load(str(past_path)).graph
    outer_inputs = {i.name: i for i in list(g0.input) + list(g1.input)}
    outer = set(outer_inputs)
    n0, i0, o0 = _prefixed(g0, "nopast_", outer)
    n1, i1, o1 = _prefixed(g1, "past_", outer)
    presents = [o.name for o in g0.output]  # logits + every present, in order
    by_name = dict(zip([o.name for o in g1.output], o1))
    then_outs, extra = [], []
    for name in presents:
        if name in by_name:
            then_outs.append(by_name[name])
        else:  # cross-attention K/V: unchanged from the input
            src = name.replace("present", "past_key_values", 1)
            extra.append(helper.make_node("Identity", [src], ["passthru_" + name]))
            then_outs.append("passthru_" + name)
    vi = lambda n: helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)  # noqa: E731
    then_g = helper.make_graph(n1 + extra, "with_past", [], [vi(n) for n in then_outs])
    else_g = helper.make_graph(n0, "no_past", [], [vi(n) for n in o0])
    if_node = helper.make_node("If", ["use_cache_branch"], presents, then_branch=then_g, else_branch=else_g)
    inputs = [outer_inputs["input_ids"], outer_inputs["encoder_attention_mask"], outer_inputs["encoder_hidden_states"]]
    inputs += [outer_inputs[n] for n in past_names(n_layers, "optimum", "past_key_values")]
    inputs.append(helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1]))
    outputs = [onnx.ValueInfoProto() for _ in g0.output]
    for o, src in zip(outputs, g0.output):
        o.CopyFrom(src)
    graph = helper.make_graph([if_node], "decoder_merged", inputs, outputs, initializer=i0 + i1)
    model = helper.make_model(graph, opset_imports=onnx.load(str(init_path)).opset_import)
    model.ir_version = onnx.load(str(init_path)).ir_version
    onnx.checker.check_model(model)
    onnx.save(model, str(out_path))


# ---- reference and checks ----------------------------------------------------------------------


def generate(m, tok: Tokenizer, gen: GenerationConfig, text: str, **kw) -> list[list[int]]:
    ids = torch.tensor([tok.encode(text).ids])
    with torch.no_grad():
        out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen, **kw)
    return [row[1:].tolist() for row in out]  # without the decoder start token


def strip(seq: list[int], pad: int, eos: int) -> list[int]:
    """Tokens up to and including the first EOS (transformers pads finished rows)."""
    return seq[:seq.index(eos) + 1] if eos in seq else seq


def onnx_greedy(paths: dict[str, Path], tok: Tokenizer, text: str, start: int, eos: int, steps: int,
                forced_bos: int | None) -> list[int]:
    """A plain loop over the exported graphs (checks the export, not inferd)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    enc, init, past = (ort.InferenceSession(str(paths[k]), so) for k in ("enc", "init", "past"))
    ids = np.array([tok.encode(text).ids], dtype=np.int64)
    mask = np.ones_like(ids)
    hs = enc.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    outs = init.run(None, {"input_ids": np.array([[start]]), "encoder_attention_mask": mask,
                           "encoder_hidden_states": hs})
    names = [o.name for o in init.get_outputs()][1:]
    kv = dict(zip(names, outs[1:]))
    got = []
    logits = outs[0][0, -1]
    for step in range(steps):
        nxt = forced_bos if (step == 0 and forced_bos is not None) else int(np.argmax(logits))
        got.append(nxt)
        if nxt == eos:
            break
        feed = {"input_ids": np.array([[nxt]]), "encoder_attention_mask": mask}
        for i in past.get_inputs()[2:]:
            feed[i.name] = kv[i.name.replace("past_key_values", "present", 1).replace("past", "present", 1)]
        res = past.run(None, feed)
        logits = res[0][0, -1]
        kv.update(dict(zip([o.name for o in past.get_outputs()][1:], res[1:])))
    return got


def write_folder(out: Path, m, tok_path: Path, gen: GenerationConfig, manifest: dict | None) -> None:
    m.config.architectures = [type(m).__name__]
    m.config.to_json_file(str(out / "config.json"))
    gen.to_json_file(str(out / "generation_config.json"))
    shutil.copy(tok_path, out / "tokenizer.json")
    if manifest:
        (out / "model_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def family(root: Path, name: str, m, gen: GenerationConfig, tok: Tokenizer, tok_path: Path, n_layers: int,
           ct2: bool) -> None:
    start, eos, pad = gen.decoder_start_token_id, gen.eos_token_id, gen.pad_token_id
    ref: dict = {"inputs": INPUTS, "decoder_start_token_id": start, "eos_token_id": eos, "cases": {}}
    cases = {"greedy": dict(num_beams=1, do_sample=False),
             "beam4": dict(num_beams=4, num_return_sequences=2, do_sample=False),
             "greedy_max5": dict(num_beams=1, do_sample=False, max_new_tokens=5),
             "beam3_max6": dict(num_beams=3, num_return_sequences=3, do_sample=False, max_new_tokens=6)}
    for case, kw in cases.items():
        ref["cases"][case] = {"params": kw, "tokens": [], "texts": []}
        for text in INPUTS:
            seqs = [strip(s, pad, eos) for s in generate(m, tok, gen, text, **kw)]
            ref["cases"][case]["tokens"].append(seqs)
            ref["cases"][case]["texts"].append([tok.decode(s, skip_special_tokens=True) for s in seqs])
    ref["input_tokens"] = [len(tok.encode(t).ids) for t in INPUTS]
    (root / f"reference-{name}.json").write_text(json.dumps(ref, indent=1) + "\n")
    forced_bos = gen.forced_bos_token_id
    for style in ("antfly", "optimum"):
        out = root / f"tiny-{name}-{style}"
        paths = export_all(m, n_layers, out, style)
        write_folder(out, m, tok_path, gen, None)
        for i, text in enumerate(INPUTS):  # the export reproduces torch's greedy decoding
            want = ref["cases"]["greedy"]["tokens"][i][0]
            got = onnx_greedy(paths, tok, text, start, eos, len(want), forced_bos)
            if gen.no_repeat_ngram_size is None and got != want:
                raise SystemExit(f"{out}: export differs from torch: {got} != {want}")
    merged = root / f"tiny-{name}-merged"
    merged.mkdir(parents=True, exist_ok=True)
    opt = root / f"tiny-{name}-optimum"
    shutil.copy(opt / "encoder_model.onnx", merged / "encoder_model.onnx")
    merge(opt / "decoder_model.onnx", opt / "decoder_with_past_model.onnx", merged / "decoder_model_merged.onnx",
          n_layers)
    write_folder(merged, m, tok_path, gen, None)
    if ct2:
        import ctranslate2

        hf = root / f"_hf-{name}"
        m.save_pretrained(str(hf))
        gen.save_pretrained(str(hf))
        from transformers import PreTrainedTokenizerFast

        PreTrainedTokenizerFast(tokenizer_file=str(tok_path), pad_token="<pad>", eos_token="</s>",
                                unk_token="<unk>").save_pretrained(str(hf))
        out = root / f"tiny-{name}-ct2"
        ctranslate2.converters.TransformersConverter(str(hf)).convert(str(out), force=True)
        (out / "model_manifest.json").write_text(json.dumps({"architecture": type(m).__name__}, indent=2) + "\n")
        shutil.copy(tok_path, out / "tokenizer.json")
        gen.to_json_file(str(out / "generation_config.json"))
        shutil.rmtree(hf)


def bench_model(root: Path) -> None:
    """t5-small-sized random weights: per-step compute like the real model's (no references)."""
    torch.manual_seed(0)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / "_tok.json"
    tok = t5_tokenizer(tmp)
    tok.add_tokens([f"<extra_{i}>" for i in range(32128 - tok.get_vocab_size())])
    tok.save(str(tmp))
    cfg = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6,
                   num_heads=8, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                   attn_implementation="eager")
    m = T5ForConditionalGeneration(cfg).eval()
    gen = GenerationConfig(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0, max_length=64)
    out = root / "t5-small-random-optimum"
    export_all(m, 6, out, "optimum")
    write_folder(out, m, tmp, gen, None)
    import ctranslate2
    from transformers import PreTrainedTokenizerFast

    hf = root / "_hf"
    m.save_pretrained(str(hf))
    gen.save_pretrained(str(hf))
    PreTrainedTokenizerFast(tokenizer_file=str(tmp), pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(str(hf))
    ct2 = root / "t5-small-random-ct2"
    ctranslate2.converters.TransformersConverter(str(hf)).convert(str(ct2), force=True)
    shutil.copy(tmp, ct2 / "tokenizer.json")
    gen.to_json_file(str(ct2 / "generation_config.json"))
    shutil.rmtree(hf)
    tmp.unlink()


def main(root: Path) -> None:
    torch.manual_seed(0)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / "_tok.json"
    tok = t5_tokenizer(tmp)
    m, gen = t5_model(tok.get_vocab_size())
    family(root, "t5", m, gen, tok, tmp, 2, ct2=True)
    tok = bart_tokenizer(tmp)
    torch.manual_seed(1)
    m, gen = bart_model(tok.get_vocab_size())
    # A bias on </s> so that greedy generations end at as many different lengths as possible
    # (random weights otherwise never stop before max_length).
    lengths = {}
    for bias in (2.0, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5):
        with torch.no_grad():
            m.final_logits_bias[0, 2] = bias
        lengths[bias] = len({len(strip(generate(m, tok, gen, t, num_beams=1)[0], 1, 2)) for t in INPUTS})
    with torch.no_grad():
        m.final_logits_bias[0, 2] = max(lengths, key=lambda b: (lengths[b], -b))
    family(root, "bart", m, gen, tok, tmp, 2, ct2=False)
    tmp.unlink()
    for f in sorted(root.rglob("*")):
        if f.is_file():
            print(f"{f.stat().st_size:>9}  {f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--bench":
        bench_model(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "tests/fixtures/seq2seq"))
