"""Tiny random-weight extraction models in real formats, with references from the libraries
that define them (run in a fixture venv with torch, transformers and gliner; never in inferd):

    /work/fixenv/bin/python scripts/make_tiny_extractors.py [OUTDIR]

Writes OUTDIR (default tests/fixtures/onnx)/<name>/ with reference.json beside each model:

  tiny-gliner        GLiNER (uni-encoder span) over a 2-layer BERT, exported with gliner's own
                     export_to_onnx; references from gliner's inference (flat and nested) and its
                     multitask relation pipeline (GLiNERRelationExtractor)
  tiny-bert-ner      BertForTokenClassification with BIO labels; reference: transformers'
                     token-classification pipeline, aggregation_strategy="simple"
  tiny-bert-topic    BertForSequenceClassification (3 fixed labels); reference: text-classification
                     pipeline, softmax and sigmoid
  tiny-bert-nli      BertForSequenceClassification (contradiction/neutral/entailment); reference:
                     the zero-shot-classification pipeline, single and multi-label
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from make_tiny_encoders import _Kw, config, make_tokenizer  # noqa: E402  (same vocabulary and sizes)

from transformers import (BertForSequenceClassification, BertForTokenClassification, BertModel,  # noqa: E402
                          PreTrainedTokenizerFast, pipeline)

NER_TEXTS = ["the quick brown fox jumps over the lazy dog", "a local inference server answers requests",
             "rain falls from clouds when water vapour condenses"]
CLS_TEXTS = ["bake the bread for forty minutes", "rain falls from clouds", "embeddings map text to vectors"]
GLINER_TEXTS = ["the quick brown fox jumps over the lazy dog.",
                "a local inference server answers requests, quickly!",
                "rain falls from clouds when water vapour condenses"]
GLINER_LABELS = ["animal", "server", "weather"]
RELATIONS = ["jumps over", "answers"]
TOPICS = {0: "cooking", 1: "weather", 2: "computing"}
NLI = {0: "contradiction", 1: "neutral", 2: "entailment"}
ZS_LABELS = ["cooking", "weather", "computing"]


def hf_tokenizer(tok_path: Path) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_file=str(tok_path), unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", model_max_length=64,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def export(model, out: Path) -> None:
    ids = torch.tensor([[2, 10, 11, 3], [2, 12, 3, 0]])
    torch.onnx.export(_Kw(model, "logits"), (ids, (ids > 0).long(), torch.zeros_like(ids)), str(out / "model.onnx"),
                      input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["logits"],
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in ["input_ids", "attention_mask",
                                                                          "token_type_ids", "logits"]},
                      opset_version=17, dynamo=False)


def save(model, out: Path, tok_path: Path, manifest: dict, reference: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.config.architectures = [type(model).__name__]
    model.config.to_json_file(str(out / "config.json"))
    (out / "tokenizer.json").write_bytes(tok_path.read_bytes())
    (out / "model_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    export(model, out)


def plain(x):
    """Pipeline outputs (numpy floats inside) as JSON values."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x.item() if hasattr(x, "item") else x


def make_ner(root: Path, tok_path: Path, vocab: int) -> None:
    labels = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
    m = BertForTokenClassification(config(vocab, num_labels=len(labels), id2label=dict(enumerate(labels)),
                                          label2id={v: k for k, v in enumerate(labels)})).eval()
    nlp = pipeline("token-classification", model=m, tokenizer=hf_tokenizer(tok_path), aggregation_strategy="simple",
                   device="cpu")
    ref = {"texts": NER_TEXTS, "entities": [plain(nlp(t)) for t in NER_TEXTS]}
    save(m, root / "tiny-bert-ner", tok_path, {"type": "extractor"}, ref)


def make_topic(root: Path, tok_path: Path, vocab: int) -> None:
    m = BertForSequenceClassification(config(vocab, num_labels=3, id2label=TOPICS,
                                             label2id={v: k for k, v in TOPICS.items()})).eval()
    nlp = pipeline("text-classification", model=m, tokenizer=hf_tokenizer(tok_path), device="cpu")
    ref = {"texts": CLS_TEXTS, "softmax": [plain(nlp(t, top_k=None)) for t in CLS_TEXTS],
           "sigmoid": [plain(nlp(t, top_k=None, function_to_apply="sigmoid")) for t in CLS_TEXTS]}
    save(m, root / "tiny-bert-topic", tok_path, {"type": "classifier"}, ref)


def make_nli(root: Path, tok_path: Path, vocab: int) -> None:
    m = BertForSequenceClassification(config(vocab, num_labels=3, id2label=NLI,
                                             label2id={v: k for k, v in NLI.items()})).eval()
    nlp = pipeline("zero-shot-classification", model=m, tokenizer=hf_tokenizer(tok_path), device="cpu")
    ref = {"texts": CLS_TEXTS, "labels": ZS_LABELS, "hypothesis_template": "This example is {}.",
           "single": [plain(nlp(t, candidate_labels=ZS_LABELS)) for t in CLS_TEXTS],
           "multi": [plain(nlp(t, candidate_labels=ZS_LABELS, multi_label=True)) for t in CLS_TEXTS]}
    save(m, root / "tiny-bert-nli", tok_path, {"type": "classifier"}, ref)


def make_gliner(root: Path, tok_path: Path, vocab: int) -> None:
    from gliner import GLiNER, GLiNERConfig
    from gliner.multitask import GLiNERRelationExtractor

    work = Path(tempfile.mkdtemp())
    backbone = work / "backbone"
    # 128 positions: the label prompt and the words share the encoder's window.
    bcfg = config(vocab)
    bcfg.max_position_embeddings = 128
    BertModel(bcfg, add_pooling_layer=False).save_pretrained(str(backbone))
    tok = hf_tokenizer(tok_path)
    tok.model_max_length = 128
    tok.save_pretrained(str(backbone))
    cfg = GLiNERConfig(model_name=str(backbone), hidden_size=32, max_width=4, max_len=32, dropout=0.0,
                       words_splitter_type="whitespace", span_mode="markerV0")
    torch.manual_seed(1)
    model = GLiNER.from_config(cfg, backbone_from_pretrained=True, map_location="cpu").eval()
    with torch.no_grad():  # wide weights: random scores spread out instead of sitting at 0.5
        for name, p in model.model.named_parameters():
            if "token_rep_layer" not in name and p.dim() > 1:
                p.mul_(3.0)
    out = root / "tiny-gliner"
    if out.exists():
        shutil.rmtree(out)
    model.export_to_onnx(str(out))
    gcfg = json.loads((out / "gliner_config.json").read_text())
    gcfg["model_name"] = "tiny-bert (random weights, scripts/make_tiny_extractors.py)"  # not a temp path
    gcfg.get("encoder_config", {})["_name_or_path"] = "tiny-bert"
    (out / "gliner_config.json").write_text(json.dumps(gcfg, indent=2, sort_keys=True) + "\n")
    flat, nested = {}, {}
    ref: dict = {"texts": GLINER_TEXTS, "labels": GLINER_LABELS, "max_width": 4}
    # Thresholds picked so random weights give a handful of spans per text.
    for th in (0.5, 0.7):
        flat[str(th)] = plain(model.inference(GLINER_TEXTS, GLINER_LABELS, flat_ner=True, threshold=th))
        nested[str(th)] = plain(model.inference(GLINER_TEXTS, GLINER_LABELS, flat_ner=False, threshold=th,
                                                multi_label=True))
    ref["flat"], ref["nested"] = flat, nested
    # Relations: gliner's multitask recipe (GLiNERRelationExtractor's prompt and labels,
    # "<entity text> <> <relation>" for each relation and each distinct entity text in order of
    # appearance), with the candidate targets limited to the entities found (gliner's input_spans).
    th = 0.5
    prompt = GLiNERRelationExtractor(model=model, device="cpu").prompt
    shift = len(prompt) + len(" \n ")
    ents = flat[str(th)]
    rel_labels, spans = [], []
    for row in ents:
        texts = list(dict.fromkeys(e["text"] for e in row))
        rel_labels.append([f"{t} <> {r}" for r in RELATIONS for t in texts])
        spans.append([{"start": e["start"] + shift, "end": e["end"] + shift} for e in row])
    raw = model.inference([f"{prompt} \n {t}" for t in GLINER_TEXTS], rel_labels, threshold=th, input_spans=spans)
    found = [[{"source": x["label"].split("<>")[0].strip(), "relation": x["label"].split("<>")[1].strip(),
               "start": x["start"] - shift, "end": x["end"] - shift, "score": x["score"]} for x in row] for row in raw]
    ref["relations"] = {"threshold": th, "relations": RELATIONS, "relation_labels": rel_labels, "prompt": prompt,
                        "found": plain(found)}
    (out / "model_manifest.json").write_text(json.dumps({"type": "extractor", "capabilities": ["relations"]},
                                                        indent=2) + "\n")
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    shutil.rmtree(work)


def main(root: Path) -> None:
    torch.manual_seed(0)
    root.mkdir(parents=True, exist_ok=True)
    tok_path = root / "tokenizer.json.tmp"
    vocab = make_tokenizer(tok_path).get_vocab_size()
    make_ner(root, tok_path, vocab)
    make_topic(root, tok_path, vocab)
    make_nli(root, tok_path, vocab)
    make_gliner(root, tok_path, vocab)
    tok_path.unlink()
    for name in ("tiny-gliner", "tiny-bert-ner", "tiny-bert-topic", "tiny-bert-nli"):
        for f in sorted((root / name).rglob("*")):
            print(f"{f.stat().st_size:>9}  {f}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "tests/fixtures/onnx"))
