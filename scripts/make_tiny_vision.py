"""Make the tiny vision fixtures: a TrOCR-style and a Donut-style VisionEncoderDecoder and a
CLIP dual encoder, random weights (CLIP briefly trained on colour swatches so that "a red
image" matches the red picture), exported to ONNX in the optimum layout, with reference
outputs from transformers saved beside them.

Needs torch + transformers (fixture time only; inferd never imports torch):
    python3 -m venv /tmp/fixenv && /tmp/fixenv/bin/pip install torch transformers onnx onnxscript pillow
    /tmp/fixenv/bin/pip install --no-deps optimum==2.3.0 optimum-onnx==0.1.0   # merge_decoders
    /tmp/fixenv/bin/python scripts/make_tiny_vision.py [--out tests/fixtures/vision]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

torch.manual_seed(0)
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0..3, as TrOCR/Donut (RoBERTa/XLM-R) order them
CORPUS = ["Invoice 2024-117 total $1,250.00", "Receipt: coffee 3.50 tea 2.00", "Due date 2025-01-31",
          "hello world", "ACME Corp. 42 Main Street", "Qty 2 x 19.99 = 39.98"] * 4


def bpe_tokenizer(extra_special: list[str] = ()) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS + list(extra_special),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def test_images() -> list[Image.Image]:
    """Fixed images for the preprocessing references: a wide gradient, a tall drawing."""
    a = np.zeros((20, 50, 3), dtype=np.uint8)
    a[..., 0] = np.linspace(0, 255, 50, dtype=np.uint8)[None, :]
    a[..., 1] = np.linspace(255, 0, 20, dtype=np.uint8)[:, None]
    a[..., 2] = 90
    b = Image.new("RGB", (37, 61), (240, 230, 200))
    d = ImageDraw.Draw(b)
    d.rectangle((5, 8, 30, 20), fill=(20, 40, 200))
    d.ellipse((4, 30, 33, 58), fill=(200, 20, 30))
    return [Image.fromarray(a), b]


def export(module: torch.nn.Module, args: tuple, path: Path, input_names: list[str], output_names: list[str],
           dynamic: dict[str, dict[int, str]]) -> None:
    module.eval()
    torch.onnx.export(module, args, str(path), input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic, opset_version=17, dynamo=False, do_constant_folding=True)


# ---- vision encoder-decoder ----------------------------------------------------------------------
class Enc(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        return self.m.encoder(pixel_values=pixel_values).last_hidden_state


class Dec(torch.nn.Module):
    """decoder_model.onnx: the first step (prompt) -> logits and the whole cache."""

    def __init__(self, m, n_layers):
        super().__init__()
        self.m, self.n = m, n_layers

    def forward(self, input_ids, encoder_hidden_states):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        out = self.m.decoder(input_ids=input_ids, encoder_hidden_states=encoder_hidden_states,
                             past_key_values=cache, use_cache=True, return_dict=True)
        c = out.past_key_values
        flat = []
        for i in range(self.n):
            s, x = c.self_attention_cache.layers[i], c.cross_attention_cache.layers[i]
            flat += [s.keys, s.values, x.keys, x.values]
        return (out.logits, *flat)


class DecPast(torch.nn.Module):
    """decoder_with_past_model.onnx: one more token given the cache -> logits, new self cache."""

    def __init__(self, m, n_layers):
        super().__init__()
        self.m, self.n = m, n_layers

    def forward(self, input_ids, encoder_hidden_states, *pkv):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        self_c = DynamicCache([(pkv[4 * i], pkv[4 * i + 1]) for i in range(self.n)])
        cross = DynamicCache([(pkv[4 * i + 2], pkv[4 * i + 3]) for i in range(self.n)])
        cache = EncoderDecoderCache(self_c, cross)
        out = self.m.decoder(input_ids=input_ids, encoder_hidden_states=encoder_hidden_states,
                             past_key_values=cache, use_cache=True, return_dict=True)
        c = out.past_key_values
        flat = []
        for i in range(self.n):
            s = c.self_attention_cache.layers[i]
            flat += [s.keys, s.values]
        return (out.logits, *flat)


def export_ved(model, n_layers: int, pixel: torch.Tensor, out: Path) -> None:
    enc = Enc(model)
    export(enc, (pixel,), out / "encoder_model.onnx", ["pixel_values"], ["last_hidden_state"],
           {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}})
    with torch.no_grad():
        hidden = enc(pixel)
    ids = torch.tensor([[2, 5, 6]] * pixel.shape[0])
    pkv_names = []
    for i in range(n_layers):
        pkv_names += [f"present.{i}.decoder.key", f"present.{i}.decoder.value",
                      f"present.{i}.encoder.key", f"present.{i}.encoder.value"]
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "encoder_hidden_states": {0: "batch"}, "logits": {0: "batch", 1: "seq"}}
    dyn.update({n: {0: "batch", 2: "past" if "decoder" in n else "enc"} for n in pkv_names})
    export(Dec(model, n_layers), (ids, hidden), out / "decoder_model.onnx", ["input_ids", "encoder_hidden_states"],
           ["logits", *pkv_names], dyn)
    with torch.no_grad():
        first = Dec(model, n_layers)(ids, hidden)
    past_in = [n.replace("present.", "past_key_values.") for n in pkv_names]
    present_out = [n for n in pkv_names if "decoder" in n]
    dyn = {"input_ids": {0: "batch"}, "encoder_hidden_states": {0: "batch"}, "logits": {0: "batch"}}
    dyn.update({n: {0: "batch", 2: "past_seq"} for n in past_in if "decoder" in n})
    dyn.update({n: {0: "batch"} for n in past_in if "encoder" in n})
    dyn.update({n: {0: "batch", 2: "total_seq"} for n in present_out})
    export(DecPast(model, n_layers), (ids[:, -1:], hidden, *first[1:]), out / "decoder_with_past_model.onnx",
           ["input_ids", "encoder_hidden_states", *past_in], ["logits", *present_out], dyn)


def references(model, processor, images, prompts_ids, max_new: int, beams: list[int]) -> dict:
    ref: dict = {"max_new_tokens": max_new, "cases": []}
    for bi, img in enumerate(images):
        pv = processor(images=img, return_tensors="pt").pixel_values
        for prompt in prompts_ids:
            for nb in beams:
                kw = {"decoder_input_ids": torch.tensor([prompt])} if prompt else {}
                with torch.no_grad():
                    seq = model.generate(pv, max_new_tokens=max_new, num_beams=nb, do_sample=False,
                                         early_stopping=True if nb > 1 else False, length_penalty=1.0, **kw)
                ref["cases"].append({"image": bi, "prompt_ids": prompt, "num_beams": nb, "tokens": seq[0].tolist()})
    return ref


def save_images(images: list[Image.Image], out: Path) -> None:
    for i, img in enumerate(images):
        img.save(out / f"image{i}.png")


def make_trocr(out: Path) -> None:
    from transformers import (TrOCRConfig, TrOCRForCausalLM, ViTConfig,
                              ViTImageProcessor, ViTModel, VisionEncoderDecoderConfig, VisionEncoderDecoderModel)

    tok = bpe_tokenizer()
    vocab = tok.get_vocab_size()
    enc_cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, initializer_range=0.2)
    dec_cfg = TrOCRConfig(vocab_size=vocab, d_model=32, decoder_layers=2, decoder_attention_heads=2,
                          decoder_ffn_dim=64, max_position_embeddings=64, cross_attention_hidden_size=32,
                          init_std=0.3, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                          layernorm_embedding=True, scale_embedding=False, use_learned_position_embeddings=True)
    cfg = VisionEncoderDecoderConfig(encoder=enc_cfg.to_dict(), decoder=dec_cfg.to_dict())
    cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id = 2, 1, 2
    model = VisionEncoderDecoderModel(config=cfg, encoder=ViTModel(enc_cfg, add_pooling_layer=False),
                                      decoder=TrOCRForCausalLM(dec_cfg)).eval()
    model.generation_config.decoder_start_token_id = 2
    model.generation_config.eos_token_id = 2
    model.generation_config.pad_token_id = 1
    processor = ViTImageProcessor(size={"height": 32, "width": 32}, resample=2, image_mean=[0.5] * 3,
                                  image_std=[0.5] * 3)
    _write_ved(out, model, processor, tok, 2, prompts=[None], beams=[1, 3], merged=True)


def make_donut(out: Path) -> None:
    from transformers import (DonutImageProcessor, DonutSwinConfig, DonutSwinModel, MBartConfig,
                              MBartForCausalLM, VisionEncoderDecoderConfig, VisionEncoderDecoderModel)

    extra = ["<s_cord-v2>", "<s_total>", "</s_total>", "<s_menu>", "</s_menu>", "<s_nm>", "</s_nm>", "<sep/>",
             "<s_docvqa>", "<s_question>", "</s_question>", "<s_answer>", "</s_answer>"]
    tok = bpe_tokenizer(extra)
    vocab = tok.get_vocab_size()
    enc_cfg = DonutSwinConfig(image_size=[64, 48], patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                              window_size=4, initializer_range=0.2)
    dec_cfg = MBartConfig(vocab_size=vocab, d_model=32, decoder_layers=2, decoder_attention_heads=2,
                          decoder_ffn_dim=64, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64,
                          max_position_embeddings=64, init_std=0.3, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=0, is_decoder=True, add_cross_attention=True, scale_embedding=True)
    cfg = VisionEncoderDecoderConfig(encoder=enc_cfg.to_dict(), decoder=dec_cfg.to_dict())
    cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id = 0, 1, 2
    model = VisionEncoderDecoderModel(config=cfg, encoder=DonutSwinModel(enc_cfg, add_pooling_layer=False),
                                      decoder=MBartForCausalLM(dec_cfg)).eval()
    model.generation_config.decoder_start_token_id = 0
    model.generation_config.eos_token_id = 2
    model.generation_config.pad_token_id = 1
    processor = DonutImageProcessor(size={"height": 64, "width": 48}, do_align_long_axis=True, do_thumbnail=True,
                                    do_pad=True, resample=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    cord = tok.token_to_id("<s_cord-v2>")
    q = [tok.token_to_id("<s_docvqa>"), tok.token_to_id("<s_question>"), *tok.encode("total", add_special_tokens=False).ids,
         tok.token_to_id("</s_question>"), tok.token_to_id("<s_answer>")]
    _write_ved(out, model, processor, tok, 2, prompts=[[cord], q], beams=[1, 2])


def _write_ved(out: Path, model, processor, tok: Tokenizer, n_layers: int, prompts, beams, merged=False) -> None:
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    processor.save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    images = test_images()
    save_images(images, out)
    pv = torch.cat([processor(images=im, return_tensors="pt").pixel_values for im in images])
    np.save(out / "pixel_values.npy", pv.numpy().astype(np.float32))
    export_ved(model, n_layers, pv, out)
    if merged:  # optimum's merged decoder (one graph, `use_cache_branch` picks the branch), as hub exports ship
        from optimum.onnx import merge_decoders

        merge_decoders(out / "decoder_model.onnx", out / "decoder_with_past_model.onnx", strict=False,
                       save_path=out / "decoder_model_merged.onnx")
    ref = references(model, processor, images, prompts, 12, beams)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    for c in ref["cases"]:
        c["text"] = fast.decode(c["tokens"], skip_special_tokens=True)
    (out / "reference.json").write_text(json.dumps(ref, indent=1))


# ---- CLIP ----------------------------------------------------------------------------------------
COLOURS = {"red": (220, 30, 30), "green": (30, 180, 40), "blue": (30, 50, 220), "yellow": (230, 220, 30)}


def swatch(rgb, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    a = np.clip(np.array(rgb)[None, None, :] + rng.normal(0, 12, (40, 40, 3)), 0, 255).astype(np.uint8)
    img = Image.fromarray(a)
    d = ImageDraw.Draw(img)
    x, y = rng.integers(0, 20, 2)
    d.rectangle((int(x), int(y), int(x) + 12, int(y) + 12), fill=(255, 255, 255))
    return img


def clip_tokenizer() -> Tokenizer:
    words = ["<|startoftext|>", "<|endoftext|>", "<unk>", "a", "an", "photo", "of", "image", "the", "colour", "square",
             *COLOURS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<|startoftext|> $A <|endoftext|>",
                                                       special_tokens=[("<|startoftext|>", 0), ("<|endoftext|>", 1)])
    tok.enable_padding(pad_id=1, pad_token="<|endoftext|>")
    return tok


def make_clip(out: Path) -> None:
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    tok = clip_tokenizer()
    cfg = CLIPConfig(text_config=dict(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=16,
                                      bos_token_id=0, eos_token_id=1, pad_token_id=1),
                     vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=2),
                     projection_dim=16)
    model = CLIPModel(cfg)
    processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}, resample=3)
    # A few hundred steps of contrastive training on colour swatches: enough for the tests to
    # tell a matching image from a non-matching one (random weights could not).
    names = list(COLOURS)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    model.train()
    for step in range(200):
        imgs = [swatch(COLOURS[n], step * 10 + i) for i, n in enumerate(names)]
        pv = processor(images=imgs, return_tensors="pt").pixel_values
        enc = tok.encode_batch([f"a photo of a {n} square" for n in names])
        ids = torch.tensor([e.ids for e in enc])
        mask = torch.tensor([e.attention_mask for e in enc])
        loss = model(input_ids=ids, attention_mask=mask, pixel_values=pv, return_loss=True).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    processor.save_pretrained(out)
    tok.no_padding()
    tok.save(str(out / "tokenizer.json"))

    class Vision(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            return self.m.get_image_features(pixel_values=pixel_values).pooler_output \
                if hasattr(self.m.get_image_features(pixel_values=pixel_values), "pooler_output") \
                else self.m.get_image_features(pixel_values=pixel_values)

    class Text(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            f = self.m.get_text_features(input_ids=input_ids, attention_mask=attention_mask)
            return f.pooler_output if hasattr(f, "pooler_output") else f

    images = test_images() + [swatch(COLOURS["red"], 999), swatch(COLOURS["blue"], 998)]
    save_images(images, out)
    pv = processor(images=images, return_tensors="pt").pixel_values
    np.save(out / "pixel_values.npy", pv.numpy().astype(np.float32))
    export(Vision(model), (pv,), out / "vision_model.onnx", ["pixel_values"], ["image_embeds"],
           {"pixel_values": {0: "batch"}, "image_embeds": {0: "batch"}})
    texts = ["a photo of a red square", "a photo of a blue square", "red"]
    tok.enable_padding(pad_id=1, pad_token="<|endoftext|>")
    enc = tok.encode_batch(texts)
    tok.no_padding()
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])
    export(Text(model), (ids, mask), out / "text_model.onnx", ["input_ids", "attention_mask"], ["text_embeds"],
           {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "text_embeds": {0: "batch"}})
    with torch.no_grad():
        iv = torch.nn.functional.normalize(Vision(model)(pv), dim=-1)
        single = [tok.encode(t) for t in texts]
        tv = torch.cat([Text(model)(torch.tensor([e.ids]), torch.tensor([e.attention_mask])) for e in single])
        tv = torch.nn.functional.normalize(tv, dim=-1)
    ref = {"images": [f"image{i}.png" for i in range(len(images))], "image_embeddings": iv.tolist(),
           "texts": texts, "text_embeddings": tv.tolist(), "logit_scale": float(model.logit_scale.exp())}
    (out / "reference.json").write_text(json.dumps(ref, indent=1))
    (out / "model_manifest.json").write_text(json.dumps({"type": "embedder", "family": "clip"}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "vision"))
    ap.add_argument("--only", choices=["trocr", "donut", "clip"])
    a = ap.parse_args()
    out = Path(a.out)
    for name, fn in (("trocr", make_trocr), ("donut", make_donut), ("clip", make_clip)):
        if a.only and a.only != name:
            continue
        d = out / f"{name}-tiny"
        shutil.rmtree(d, ignore_errors=True)
        torch.manual_seed(0)
        fn(d)
        print("wrote", d, sum(p.stat().st_size for p in d.iterdir()) // 1024, "KiB")


if __name__ == "__main__":
    main()
