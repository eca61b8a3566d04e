"""Tiny random-weight BERT encoders exported to ONNX, with reference outputs from transformers.

Run with the fixture venv (torch + transformers live only there, never in inferd):
    /work/fixture-venv/bin/python scripts/make_tiny_encoders.py [OUTDIR]
Writes OUTDIR (default tests/fixtures/onnx)/<name>/ with model.onnx, config.json, tokenizer.json,
model_manifest.json where needed, and reference.json: what transformers computes for fixed inputs.
Tests compare inferd's numbers to these within 1e-4, so neither torch nor a hub is needed there.

  tiny-bert-embed    BertModel                          mean/cls embeddings, ColBERT MaxSim scores
  tiny-bert-rerank   BertForSequenceClassification (1)  cross-encoder logits for (query, doc) pairs
  tiny-bert-splade   BertForMaskedLM (+ model.safetensors) SPLADE sparse vectors
  tiny-bert-chunker  BertForTokenClassification (2)     per-token boundary probabilities
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import (BertConfig, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification,
                          BertModel)

CORPUS = ["the quick brown fox jumps over the lazy dog", "a local inference server answers requests",
          "embeddings map text to vectors", "rerankers score a query against a passage",
          "rain falls from clouds when water vapour condenses", "bake the bread for forty minutes",
          "chunking splits long documents into pieces", "batching many sequences raises throughput"]
SENTENCES = ["what causes rain", "rain falls from clouds", "bake the bread for forty minutes",
             "embeddings map text to vectors, quickly!", "a", "the quick brown fox jumps over the lazy dog " * 3]
QUERY = "what causes rain"
DOCS = ["rain falls from clouds when water vapour condenses", "bake the bread", "a server answers requests"]
CHUNK_TEXT = ("The quick brown fox jumps over the lazy dog. Rain falls from clouds. "
              "Bake the bread for forty minutes. Embeddings map text to vectors.")
MAX_LEN = 64


def make_tokenizer(path: Path) -> Tokenizer:
    """Deterministic WordPiece vocab: specials, characters, ##characters, corpus words."""
    pre = pre_tokenizers.BertPreTokenizer()
    words = sorted({w for line in CORPUS for w, _ in pre.pre_tokenize_str(line.lower())})
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-:;()"))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars] + words
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(dict.fromkeys(vocab))}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(vocab[:5])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.save(str(path))
    return tok


def config(vocab: int, **kw) -> BertConfig:
    return BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=MAX_LEN,
                      initializer_range=0.3, **kw)  # wide weights: outputs differ clearly between inputs


def batch(tok: Tokenizer, texts, pairs=None):
    tok.enable_truncation(MAX_LEN)
    tok.enable_padding(pad_id=0)
    encs = tok.encode_batch(list(zip(texts, pairs)) if pairs else list(texts))
    tok.no_padding()
    t = lambda f: torch.tensor([getattr(e, f) for e in encs], dtype=torch.long)  # noqa: E731
    return t("ids"), t("attention_mask"), t("type_ids")


class _Kw(torch.nn.Module):
    """Positional ONNX inputs -> keyword arguments (transformers' forward order is not stable)."""

    def __init__(self, model, output: str):
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return getattr(out, self.output)


def run(model, ids, mask, types):
    return model(input_ids=ids, attention_mask=mask, token_type_ids=types)


def export(model, out: Path, outputs: list[str]) -> None:
    ids = torch.tensor([[2, 10, 11, 3], [2, 12, 3, 0]])
    torch.onnx.export(_Kw(model, outputs[0]), (ids, (ids > 0).long(), torch.zeros_like(ids)), str(out / "model.onnx"),
                      input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=outputs,
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in ["input_ids", "attention_mask",
                                                                          "token_type_ids", *outputs]},
                      opset_version=17, dynamo=False)


def save(model, out: Path, tok_path: Path, manifest: dict | None, reference: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.config.architectures = [type(model).__name__]
    model.config.to_json_file(str(out / "config.json"))
    (out / "tokenizer.json").write_bytes(tok_path.read_bytes())
    if manifest:
        (out / "model_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")


def rounded(t) -> list:
    return torch.round(t.double() * 1e7).div(1e7).tolist()


def main(root: Path) -> None:
    torch.manual_seed(0)
    root.mkdir(parents=True, exist_ok=True)
    tok_path = root / "tokenizer.json.tmp"
    tok = make_tokenizer(tok_path)
    vocab = tok.get_vocab_size()

    # -- dense embedder (BertModel): mean and CLS pooling, and ColBERT MaxSim over token vectors
    m = BertModel(config(vocab), add_pooling_layer=False).eval()
    ids, mask, types = batch(tok, SENTENCES)
    with torch.no_grad():
        hidden = m(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        mf = mask.unsqueeze(-1).float()
        mean = torch.nn.functional.normalize((hidden * mf).sum(1) / mf.sum(1), dim=-1)
        cls = torch.nn.functional.normalize(hidden[:, 0], dim=-1)
        q = run(m, *batch(tok, [QUERY])).last_hidden_state[0]
        q = torch.nn.functional.normalize(q, dim=-1)
        maxsim = []
        for d in DOCS:
            dids, dmask, dtypes = batch(tok, [d])
            dv = torch.nn.functional.normalize(run(m, dids, dmask, dtypes).last_hidden_state[0], dim=-1)
            maxsim.append((q @ dv.T).max(dim=1).values.sum().item())
    out = root / "tiny-bert-embed"
    save(m, out, tok_path, {"type": "embedder", "pooling": "mean", "max_length": MAX_LEN,
                            "prefixes": {"query": "query: ", "document": "passage: "}},
         {"sentences": SENTENCES, "mean": rounded(mean), "cls": rounded(cls), "query": QUERY, "documents": DOCS,
          "maxsim": maxsim, "token_counts": mask.sum(1).tolist()})
    export(m, out, ["last_hidden_state"])

    # -- cross-encoder (one logit per pair)
    m = BertForSequenceClassification(config(vocab, num_labels=1)).eval()
    with torch.no_grad():
        logits = run(m, *batch(tok, [QUERY] * len(DOCS), DOCS)).logits[:, 0]
    out = root / "tiny-bert-rerank"
    save(m, out, tok_path, None, {"query": QUERY, "documents": DOCS, "scores": logits.tolist()})
    export(m, out, ["logits"])

    # -- SPLADE (masked-LM head): max over tokens of log(1 + relu(logits)), top_k
    m = BertForMaskedLM(config(vocab)).eval()
    with torch.no_grad():
        ids, mask, types = batch(tok, SENTENCES)
        logits = m(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        act = torch.log1p(torch.relu(logits)) * mask.unsqueeze(-1)
        vec = act.max(dim=1).values
    sparse = []
    for row in vec:
        idx = torch.nonzero(row > 0).flatten()
        top = idx[torch.argsort(row[idx], descending=True)[:16]].sort().values
        sparse.append({"indices": top.tolist(), "values": row[top].tolist()})
    out = root / "tiny-bert-splade"
    save(m, out, tok_path, {"type": "embedder", "capabilities": ["sparse"], "top_k": 16, "max_length": MAX_LEN},
         {"sentences": SENTENCES, "sparse": sparse})
    export(m, out, ["logits"])
    m.save_pretrained(str(root / "tiny-bert-splade-safetensors"), safe_serialization=True)
    st = root / "tiny-bert-splade-safetensors"
    (st / "tokenizer.json").write_bytes(tok_path.read_bytes())
    (st / "model_manifest.json").write_text(json.dumps({"type": "embedder", "capabilities": ["sparse"],
                                                         "top_k": 16, "max_length": MAX_LEN}, indent=2) + "\n")
    for extra in st.glob("generation_config.json"):
        extra.unlink()

    # -- token-classifier chunker: label 1 = "a chunk ends after this token"
    m = BertForTokenClassification(config(vocab, num_labels=2, id2label={0: "O", 1: "BOUNDARY"},
                                          label2id={"O": 0, "BOUNDARY": 1})).eval()
    with torch.no_grad():
        tok.no_truncation()
        enc = tok.encode(CHUNK_TEXT)
        ids = torch.tensor([enc.ids])
        probs = torch.softmax(run(m, ids, torch.ones_like(ids), torch.zeros_like(ids)).logits[0], -1)[:, 1]
    out = root / "tiny-bert-chunker"
    save(m, out, tok_path, {"type": "chunker"},
         {"text": CHUNK_TEXT, "ids": enc.ids, "offsets": enc.offsets, "boundary_probs": probs.tolist()})
    export(m, out, ["logits"])
    tok_path.unlink()
    for f in sorted(root.rglob("*")):
        if f.is_file():
            print(f"{f.stat().st_size:>9}  {f}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "tests/fixtures/onnx"))
