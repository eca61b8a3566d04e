"""Tiny random-weight llama GGUF (+ optional LoRA) with a byte-level BPE tokenizer and a
ChatML chat template, for tests. F32 weights, so llama.cpp's CPU decoding is batch-invariant.

Regenerate the committed fixtures (deterministic, seed 0):
    python scripts/make_tiny_gguf.py tests/fixtures/gguf/tiny-llama.gguf --lora tests/fixtures/gguf/tiny-lora.gguf
    python scripts/make_tiny_gguf.py tests/fixtures/gguf/tiny-fim.gguf --fim
`--fim` adds Qwen2.5-Coder's six fill-in-the-middle tokens as control tokens and names them in
tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id (the /infill tests).
needs: pip install gguf numpy"""
import sys
import numpy as np
import gguf

N_EMBD, N_HEAD, N_HEAD_KV, N_LAYER, N_FF, N_CTX = 64, 4, 2, 2, 128, 256
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ a", "o n", "r e", "Ġ s", "a t", "e n", "o r",
          "l l", "he ll", "hell o", "Ġ hello", "Ġ w", "Ġw or", "Ġwor l", "Ġworl d"]
SPECIAL = ["<|bos|>", "<|im_end|>", "<|im_start|>"]  # bos, eos, extra
FIM = {"pre": "<|fim_prefix|>", "suf": "<|fim_suffix|>", "mid": "<|fim_middle|>", "pad": "<|fim_pad|>",
       "rep": "<|repo_name|>", "sep": "<|file_sep|>"}


def byte_chars():  # GPT-2 bytes_to_unicode, in byte order 0..255
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


def vocab(fim=False):
    toks = byte_chars()
    for m in MERGES:
        t = m.replace(" ", "")
        if t not in toks:
            toks.append(t)
    special = SPECIAL + (list(FIM.values()) if fim else [])
    types = [gguf.TokenType.NORMAL] * len(toks) + [gguf.TokenType.CONTROL] * len(special)
    return toks + special, types, MERGES


def main(out, lora=None, seed=0, fim=False):
    rng = np.random.default_rng(seed)
    r = lambda *s: (rng.standard_normal(s) * 0.5 / np.sqrt(s[-1])).astype(np.float32)
    toks, types, merges = vocab(fim)
    n_vocab, hd = len(toks), N_EMBD // N_HEAD
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(N_CTX); w.add_embedding_length(N_EMBD); w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF); w.add_head_count(N_HEAD); w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(hd); w.add_layer_norm_rms_eps(1e-5); w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("gpt-2")
    w.add_token_list(toks); w.add_token_types(types); w.add_token_merges(merges)
    w.add_bos_token_id(toks.index("<|bos|>")); w.add_eos_token_id(toks.index("<|im_end|>")); w.add_add_bos_token(True)
    if fim:
        for k, t in FIM.items():
            w.add_uint32(f"tokenizer.ggml.fim_{k}_token_id", toks.index(t))
    w.add_chat_template(CHATML)
    w.add_tensor("token_embd.weight", r(n_vocab, N_EMBD) * 4)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    w.add_tensor("output.weight", r(n_vocab, N_EMBD) * 8)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        for n, a in [("attn_norm", np.ones(N_EMBD, np.float32)), ("ffn_norm", np.ones(N_EMBD, np.float32)),
                     ("attn_q", r(N_EMBD, N_EMBD)), ("attn_k", r(N_HEAD_KV * hd, N_EMBD)),
                     ("attn_v", r(N_HEAD_KV * hd, N_EMBD)), ("attn_output", r(N_EMBD, N_EMBD)),
                     ("ffn_gate", r(N_FF, N_EMBD)), ("ffn_up", r(N_FF, N_EMBD)), ("ffn_down", r(N_EMBD, N_FF))]:
            w.add_tensor(p + n + ".weight", a)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    if lora:  # rank-4 LoRA on attn_q/attn_v: A is (rank, n_in), B is (n_out, rank) in numpy order
        lw = gguf.GGUFWriter(lora, "llama")
        lw.add_string("general.type", "adapter"); lw.add_string("adapter.type", "lora")
        lw.add_float32("adapter.lora.alpha", 8.0)
        for i in range(N_LAYER):
            for n, n_out in [("attn_q", N_EMBD), ("attn_v", N_HEAD_KV * hd)]:
                lw.add_tensor(f"blk.{i}.{n}.weight.lora_a", r(4, N_EMBD))
                lw.add_tensor(f"blk.{i}.{n}.weight.lora_b", r(n_out, 4) * 4)
        lw.write_header_to_file(); lw.write_kv_data_to_file(); lw.write_tensors_to_file(); lw.close()


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[a.index("--lora") + 1] if "--lora" in a else None, fim="--fim" in a)
