"""Tiny random-weight LlamaForCausalLM in onnxruntime-genai's layout (genai_config.json,
model.onnx(+.data), tokenizer files), converted by onnxruntime-genai's own model builder, with
transformers' greedy token ids as reference.json. For tests/test_onnx_genai.py.

Run in the fixture venv (deterministic, seed 0):
    /work/fixture-venv/bin/python scripts/make_tiny_genai.py tests/fixtures/genai/tiny-llama
needs: torch==2.13.0 transformers==5.24.0 tokenizers==0.23.3 onnx==1.23.2 onnxscript==0.7.2
       onnxruntime==1.31.1 onnxruntime-genai==0.18.0 (the builder: `onnxruntime_genai.models.builder`)

The tokenizer is the byte-level BPE of scripts/make_tiny_gguf.py (GPT-2 byte alphabet, 20
merges, <|bos|> <|im_end|> <|im_start|>) written as a real tokenizer.json by `tokenizers`, with
a ChatML chat template in tokenizer_config.json. The weights are scaled up from transformers'
default init (std 0.02 gives near-uniform logits, so greedy decoding would repeat one token)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ a", "o n", "r e", "Ġ s", "a t", "e n", "o r",
          "l l", "he ll", "hell o", "Ġ hello", "Ġ w", "Ġw or", "Ġwor l", "Ġworl d"]
SPECIAL = ["<|bos|>", "<|im_end|>", "<|im_start|>"]
PROMPTS = ["hello world", "the cat sat on the mat", "Once upon a time", "a"]
NEW_TOKENS = 24


def byte_chars() -> list[str]:  # GPT-2 bytes_to_unicode, in byte order 0..255
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


def make_tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    toks = byte_chars()
    for m in MERGES:
        t = m.replace(" ", "")
        if t not in toks:
            toks.append(t)
    vocab = {t: i for i, t in enumerate(toks + SPECIAL)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in MERGES]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(SPECIAL)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|im_end|>",
                                   pad_token="<|im_end|>", chat_template=CHATML)
    fast.save_pretrained(folder)
    return fast


def main(out: Path, seed: int = 0) -> None:
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        tok = make_tokenizer(hf)
        n_vocab = len(tok)
        cfg = LlamaConfig(vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                          rms_norm_eps=1e-5, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.eos_token_id, tie_word_embeddings=False, torch_dtype="float32")
        model = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2:
                    p.normal_(0.0, (0.5 if "embed" not in name else 2.0) / p.shape[-1] ** 0.5)
            model.lm_head.weight.mul_(8.0)
        model.save_pretrained(hf)
        model.generation_config.save_pretrained(hf)
        built = Path(tmp) / "onnx"
        from onnxruntime_genai.models.builder import create_model, parse_extra_options  # noqa: F401
        import subprocess
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(built),
                        "-p", "fp32", "-e", "cpu", "-c", str(Path(tmp) / "cache")], check=True)
        refs = []
        for prompt in PROMPTS:
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                     max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=tok.eos_token_id,
                                     pad_token_id=tok.eos_token_id)
            refs.append({"prompt": prompt, "prompt_ids": ids, "generated": gen[0, len(ids):].tolist(),
                         "text": tok.decode(gen[0, len(ids):], skip_special_tokens=True)})
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for f in sorted(built.iterdir()):
            shutil.copy(f, out / f.name)
        (out / "reference.json").write_text(json.dumps({"max_new_tokens": NEW_TOKENS, "eos": tok.eos_token_id,
                                                        "cases": refs}, indent=1) + "\n")
    print("wrote", out, sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/genai/tiny-llama"))
