"""A tiny random-weight BERT as GGUF (llama.cpp's `bert` architecture, WordPiece vocabulary),
written with the gguf package into a test's tmp dir: an embedder (pooling in its metadata) or,
with a classification head (`cls`, `cls.output`), a cross-encoder reranker for llama.cpp's
rank pooling. The vocabulary is a few whole words plus single letters, so any lowercase text
tokenizes."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

E, H, FF, L, CTX = 32, 4, 64, 2, 512
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["what", "causes", "rain", "falls", "from", "clouds", "bake", "the", "bread", "for", "forty", "minutes",
         "stock", "market", "fell", "sharply", "today", "water", "vapour", "condenses"]
LETTERS = "abcdefghijklmnopqrstuvwxyz"
PAD, UNK, CLS, SEP, MASK = range(5)


def vocab() -> list[str]:
    # llama.cpp's WordPiece: a word-initial piece is spelled with a leading U+2581, a
    # continuation piece bare (convert_hf_to_gguf's "phantom space"), specials as they are.
    return SPECIAL + ["\u2581" + w for w in WORDS] + ["\u2581" + c for c in LETTERS] + list(LETTERS)


def write(path: Path, *, rank_head: bool, pooling: gguf.PoolingType = gguf.PoolingType.MEAN, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)

    def r(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    def norm(name: str) -> None:
        w.add_tensor(f"{name}.weight", (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
        w.add_tensor(f"{name}.bias", (0.1 * rng.standard_normal(E)).astype(np.float32))

    toks = vocab()
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_context_length(CTX)
    w.add_embedding_length(E)
    w.add_feed_forward_length(FF)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.RANK if rank_head else pooling)
    w.add_tokenizer_model("bert")
    w.add_token_list(toks)
    w.add_token_types([gguf.TokenType.CONTROL] * len(SPECIAL) + [gguf.TokenType.NORMAL] * (len(toks) - len(SPECIAL)))
    w.add_token_type_count(2)
    w.add_bos_token_id(CLS)
    w.add_eos_token_id(SEP)
    w.add_sep_token_id(SEP)
    w.add_pad_token_id(PAD)
    w.add_unk_token_id(UNK)
    w.add_mask_token_id(MASK)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(False)
    w.add_tensor("token_embd.weight", r(len(toks), E, scale=1.0))
    w.add_tensor("token_types.weight", r(2, E, scale=1.0))
    w.add_tensor("position_embd.weight", r(CTX, E, scale=1.0))
    norm("token_embd_norm")
    for i in range(L):
        b = f"blk.{i}"
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"{b}.{part}.weight", r(E, E))
            w.add_tensor(f"{b}.{part}.bias", r(E))
        norm(f"{b}.attn_output_norm")
        w.add_tensor(f"{b}.ffn_up.weight", r(FF, E))
        w.add_tensor(f"{b}.ffn_up.bias", r(FF))
        w.add_tensor(f"{b}.ffn_down.weight", r(E, FF))
        w.add_tensor(f"{b}.ffn_down.bias", r(E))
        norm(f"{b}.layer_output_norm")
    if rank_head:  # BertForSequenceClassification's pooler (dense + tanh) and its 1-label output
        w.add_tensor("cls.weight", r(E, E, scale=1.0))
        w.add_tensor("cls.bias", r(E))
        w.add_tensor("cls.output.weight", r(1, E, scale=3.0))
        w.add_tensor("cls.output.bias", np.array([0.1], np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def ids(text: str) -> list[int]:
    """The fixture's own WordPiece ids of a text of its words (no specials): the test's
    independent tokenization, to check the server's input format against."""
    index = {t: i for i, t in enumerate(vocab())}
    return [index["\u2581" + word] for word in text.lower().split()]
