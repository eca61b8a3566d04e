"""Make the tiny ColVision (late-interaction image retrieval) fixture: a random-weight
ColPali (`ColPaliForRetrieval`: PaliGemma = SigLIP vision tower + Gemma decoder + a 32-d
projection), exported to ONNX as two graphs, with reference outputs from transformers.

Why ColPali and not ColQwen2: ColQwen2's Qwen2-VL image processor keeps each image's aspect
ratio (`smart_resize` to multiples of patch x merge), so `image_grid_thw` differs from one
image to the next, and its vision tower derives its rotary positions and attention windows
from `image_grid_thw` in Python: a traced ONNX graph (torch.onnx.export) holds one grid only,
so it could take only the images the processor happens to bring to that grid (tried: the
tower exports and matches at its traced grid, 3e-8; 32 patches instead of 16 fail in
onnxruntime, and another grid of 16 patches runs silently with the traced positions). PaliGemma's
processor resizes every image to one fixed size (here 32 x 32, 4 x 4 patches of 8 pixels,
16 image tokens), so one graph takes every image and inferd's preprocessing is the
processor's, exactly, for any input.

Files (tests/fixtures/vision/colpali-tiny/):
  text_model.onnx       input_ids, attention_mask [b, s] -> embeddings [b, s, 32] (queries)
  image_model.onnx      input_ids, attention_mask [b, s], pixel_values [b, 3, 32, 32] -> embeddings
  tokenizer.json        the processor's tokenizer (with <image> and the loc/seg tokens it adds)
  preprocessor_config.json, processor_config.json, config.json, model_manifest.json
  image0.png .. image2.png, reference.json (input ids, embeddings, score_retrieval scores)

The graphs take the token_type_ids the processor makes (all 0: PaliGemma's bidirectional
prefix) as constants of the wrapper, so inferd feeds ids and mask only.

Needs /work/fixture-venv (torch 2.13 cpu, transformers==5.24.0, onnx, onnxruntime, pillow):
    /work/fixture-venv/bin/python scripts/make_tiny_colvision.py [--out tests/fixtures/vision]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

torch.manual_seed(0)
SIZE, PATCH = 32, 8
QUERIES = ["red circle on a page", "blue invoice table"]
CORPUS = ["Question: red circle on a page", "blue invoice table total", "Describe the image.",
          "a green stripe", "Invoice 2024-117 total due date"] * 4
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # Gemma's order: pad 0, eos 1, bos 2, unk 3


def tokenizer():
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=SPECIALS, show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.padding_side = "right"  # queries padded after their tokens (the batch mask hides the pads)
    return fast


def images() -> list[Image.Image]:
    """Three 'pages': a red circle, a blue table, a green stripe; odd sizes, so resizing is exercised."""
    a = Image.new("RGB", (45, 60), (250, 250, 245))
    ImageDraw.Draw(a).ellipse((8, 12, 38, 45), fill=(220, 20, 30))
    b = Image.new("RGB", (70, 40), (245, 245, 250))
    d = ImageDraw.Draw(b)
    for y in range(5, 36, 8):
        d.line((5, y, 65, y), fill=(20, 40, 200), width=2)
    c = np.zeros((33, 33, 3), dtype=np.uint8)
    c[:, 10:20] = (30, 200, 60)
    c[..., 2] = np.linspace(0, 120, 33, dtype=np.uint8)[:, None]
    return [a, b, Image.fromarray(c)]


class TextGraph(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=torch.zeros_like(input_ids), use_cache=False).embeddings


class ImageGraph(TextGraph):
    def forward(self, input_ids, attention_mask, pixel_values):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, pixel_values=pixel_values,
                          token_type_ids=torch.zeros_like(input_ids), use_cache=False).embeddings


def main() -> None:
    from transformers import ColPaliConfig, ColPaliForRetrieval, ColPaliProcessor, SiglipImageProcessorPil

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/vision")
    out = Path(ap.parse_args().out) / "colpali-tiny"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    tok = tokenizer()
    ip = SiglipImageProcessorPil(size={"height": SIZE, "width": SIZE}, resample=3)
    ip.image_seq_length = (SIZE // PATCH) ** 2
    proc = ColPaliProcessor(image_processor=ip, tokenizer=tok)
    vocab = len(proc.tokenizer)
    cfg = ColPaliConfig(embedding_dim=32, vlm_config={
        "model_type": "paligemma", "image_token_index": proc.image_token_id, "vocab_size": vocab,
        "projection_dim": 32, "hidden_size": 32,
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": SIZE,
                          "patch_size": PATCH, "vision_use_head": False},
        "text_config": {"model_type": "gemma", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": vocab,
                        "max_position_embeddings": 256, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1}})
    cfg.vlm_config._attn_implementation = "eager"
    model = ColPaliForRetrieval(cfg).eval()
    with torch.no_grad():  # random weights, larger than the init's tiny std so scores spread
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)

    imgs = images()
    for i, im in enumerate(imgs):
        im.save(out / f"image{i}.png")
    bi = proc.process_images(imgs)
    bq = proc.process_queries(QUERIES)
    with torch.no_grad():
        ie = model(input_ids=bi["input_ids"], attention_mask=bi["attention_mask"], pixel_values=bi["pixel_values"],
                   token_type_ids=bi["token_type_ids"]).embeddings
        qe = model(input_ids=bq["input_ids"], attention_mask=bq["attention_mask"],
                   token_type_ids=bq["token_type_ids"]).embeddings
        # each query alone must give its batched vectors (right padding is invisible to real tokens)
        for k, q in enumerate(QUERIES):
            one = proc.process_queries([q])
            e1 = model(input_ids=one["input_ids"], attention_mask=one["attention_mask"],
                       token_type_ids=one["token_type_ids"]).embeddings[0]
            n = int(bq["attention_mask"][k].sum())
            assert torch.allclose(e1, qe[k, :n], atol=1e-5), "padding changed a query's vectors"
    q_list = [qe[k, : int(bq["attention_mask"][k].sum())] for k in range(len(QUERIES))]
    i_list = [ie[k] for k in range(len(imgs))]
    scores = proc.score_retrieval(q_list, i_list)

    text_path, image_path = out / "text_model.onnx", out / "image_model.onnx"
    torch.onnx.export(TextGraph(model), (bq["input_ids"], bq["attention_mask"]), str(text_path),
                      input_names=["input_ids", "attention_mask"], output_names=["embeddings"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                    "embeddings": {0: "batch", 1: "seq"}},
                      opset_version=17, dynamo=False, do_constant_folding=True)
    torch.onnx.export(ImageGraph(model), (bi["input_ids"], bi["attention_mask"], bi["pixel_values"]),
                      str(image_path), input_names=["input_ids", "attention_mask", "pixel_values"],
                      output_names=["embeddings"],
                      dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"},
                                    "pixel_values": {0: "batch"}, "embeddings": {0: "batch"}},
                      opset_version=17, dynamo=False, do_constant_folding=True)

    # the exported graphs must give transformers' vectors
    import onnxruntime as ort

    t = ort.InferenceSession(str(text_path)).run(None, {"input_ids": bq["input_ids"].numpy(),
                                                        "attention_mask": bq["attention_mask"].numpy()})[0]
    v = ort.InferenceSession(str(image_path)).run(None, {"input_ids": bi["input_ids"].numpy(),
                                                         "attention_mask": bi["attention_mask"].numpy(),
                                                         "pixel_values": bi["pixel_values"].numpy()})[0]
    assert np.abs(t - qe.numpy()).max() < 1e-4 and np.abs(v - ie.numpy()).max() < 1e-4, "ONNX differs"
    # other lengths and batch sizes than the traced ones (nothing of the trace's shapes is baked in)
    other = proc.process_queries(["a much longer query about the green stripe and the total due"])
    with torch.no_grad():
        want = TextGraph(model)(other["input_ids"], other["attention_mask"]).numpy()
        want_i = ImageGraph(model)(bi["input_ids"][1:2], bi["attention_mask"][1:2], bi["pixel_values"][1:2]).numpy()
    got = ort.InferenceSession(str(text_path)).run(None, {"input_ids": other["input_ids"].numpy(),
                                                          "attention_mask": other["attention_mask"].numpy()})[0]
    got_i = ort.InferenceSession(str(image_path)).run(None, {"input_ids": bi["input_ids"][1:2].numpy(),
                                                             "attention_mask": bi["attention_mask"][1:2].numpy(),
                                                             "pixel_values": bi["pixel_values"][1:2].numpy()})[0]
    assert np.abs(got - want).max() < 1e-4 and np.abs(got_i - want_i).max() < 1e-4, "ONNX shapes baked in"

    proc.tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    ip.to_json_file(str(out / "preprocessor_config.json"))
    cfg_json = cfg.to_dict()
    cfg_json["architectures"] = ["ColPaliForRetrieval"]
    (out / "config.json").write_text(json.dumps(cfg_json, indent=1, default=str))
    (out / "processor_config.json").write_text(json.dumps({
        "processor_class": "ColPaliProcessor", "visual_prompt_prefix": proc.visual_prompt_prefix,
        "query_prefix": proc.query_prefix, "image_seq_length": proc.image_seq_length,
        "image_token": proc.image_token, "bos_token": proc.tokenizer.bos_token,
        "query_augmentation_token": proc.query_augmentation_token}, indent=1))
    (out / "model_manifest.json").write_text(json.dumps({"type": "reranker", "capabilities": ["late_interaction"]}))
    ref = {
        "queries": QUERIES,
        "query_input_ids": [bq["input_ids"][k, : int(bq["attention_mask"][k].sum())].tolist()
                            for k in range(len(QUERIES))],
        "image_input_ids": bi["input_ids"][0].tolist(),
        "pixel_values_mean": [float(bi["pixel_values"][k].double().mean()) for k in range(len(imgs))],
        "pixel_values_first": [bi["pixel_values"][k, :, 0, :4].flatten().tolist() for k in range(len(imgs))],
        "query_embeddings_first": [q[:, :4].flatten().tolist() for q in q_list],
        "image_embeddings_first": [e[:, :4].flatten().tolist() for e in i_list],
        "scores": scores.tolist(),  # [query][image], ColPaliProcessor.score_retrieval
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1))
    print("scores", scores.tolist())
    print("sizes", {p.name: p.stat().st_size for p in sorted(out.iterdir())})


if __name__ == "__main__":
    main()
