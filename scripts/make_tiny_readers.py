"""Make the tiny Florence-2 reader fixture: a random-weight Florence2ForConditionalGeneration
(DaViT vision tower + BART, hidden 32, one layer each), briefly trained to read one drawn
image per task (so that greedy and beam decoding produce real <loc_N> region markup), exported
to ONNX in the onnx-community layout (vision_encoder.onnx, embed_tokens.onnx,
encoder_model.onnx, decoder_model.onnx + decoder_with_past_model.onnx, the decoders taking
inputs_embeds), with reference token ids from transformers' `generate` and the processor's
`post_process_generation` output beside it.

Also the Pix2Struct fixture: a random-weight Pix2StructForConditionalGeneration (VQA, 8x8
patches, max_patches 48) in optimum's layout (encoder_model.onnx, decoder_model.onnx +
decoder_with_past_model.onnx taking decoder_attention_mask as optimum's do, and their merge
decoder_model_merged.onnx), with the processor's flattened patches and `generate` tokens.

Needs the fixture venv (torch 2.13, transformers 5.24.0, which has Florence-2 and Pix2Struct
natively, so no trust_remote_code; `pip install --no-deps optimum==2.3.0 optimum-onnx==0.1.0`
for the merged decoder). Florence-2's training makes it the slow one (~7 CPU-minutes):
    /work/fixture-venv/bin/python scripts/make_tiny_readers.py [--out tests/fixtures/readers]
        [--only florence2|pix2struct] [--merge-only]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]          # BART's order: ids 0..3
LOCS = [f"<loc_{i}>" for i in range(1000)]
EXTRA = ["<od>", "</od>", "<ocr>", "</ocr>", "<poly>", "</poly>", "<sep>"]
PROMPTS = ["What is the text in the image?", "What is the text in the image, with regions?",
           "What does the image describe?", "Describe in detail what is shown in the image.",
           "Locate the objects with category name in the image.", "Locate the phrases in the caption: box"]
CORPUS = PROMPTS + ["INVOICE 42", "TOTAL 7", "a receipt with text", "box", "text", "a white page with black words"]


def tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    # Florence-2's processor adds these as special tokens (so decoding keeps them by name);
    # <image> is the native transformers placeholder, unused by the ONNX layout.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in [*EXTRA, *LOCS, "<image>"]])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def image() -> Image.Image:
    """A white page with two dark words and a grey box: something to read and to locate."""
    img = Image.new("RGB", (96, 64), (250, 250, 245))
    d = ImageDraw.Draw(img)
    d.text((6, 6), "INVOICE 42", fill=(10, 10, 10))
    d.text((6, 40), "TOTAL 7", fill=(20, 20, 60))
    d.rectangle((60, 30, 90, 58), fill=(120, 120, 120))
    return img


def second_image() -> Image.Image:
    a = np.zeros((40, 70, 3), dtype=np.uint8)
    a[..., 0] = np.linspace(0, 255, 70, dtype=np.uint8)[None, :]
    a[..., 1] = np.linspace(255, 0, 40, dtype=np.uint8)[:, None]
    a[..., 2] = 90
    return Image.fromarray(a)


def loc(*v: int) -> str:
    return "".join(f"<loc_{x}>" for x in v)


# What the tiny model is trained to answer for image(), per task token.
TARGETS = {
    "<OCR>": "INVOICE 42 TOTAL 7",
    "<OCR_WITH_REGION>": "INVOICE 42" + loc(62, 94, 562, 94, 562, 250, 62, 250) +
                         "TOTAL 7" + loc(62, 625, 437, 625, 437, 781, 62, 781),
    "<CAPTION>": "a receipt with text",
    "<OD>": "box" + loc(625, 468, 947, 906) + "text" + loc(62, 94, 562, 250),
    "<CAPTION_TO_PHRASE_GROUNDING>box": "box" + loc(625, 468, 947, 906),
}


def export(module: torch.nn.Module, args: tuple, path: Path, input_names: list[str], output_names: list[str],
           dynamic: dict[str, dict[int, str]]) -> None:
    module.eval()
    torch.onnx.export(module, args, str(path), input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic, opset_version=17, dynamo=False, do_constant_folding=True)


class Vision(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        return self.m.model.get_image_features(pixel_values=pixel_values).pooler_output


class Embed(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m.get_input_embeddings()(input_ids)


class Encoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, inputs_embeds, attention_mask):
        return self.m.model.language_model.encoder(inputs_embeds=inputs_embeds,
                                                   attention_mask=attention_mask).last_hidden_state


class Dec(torch.nn.Module):
    """decoder_model.onnx: the first step -> logits and the whole cache (self and cross)."""

    def __init__(self, m, n):
        super().__init__()
        self.m, self.n = m, n

    def forward(self, inputs_embeds, encoder_hidden_states, encoder_attention_mask):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        out = self.m.model.language_model.decoder(inputs_embeds=inputs_embeds, encoder_hidden_states=encoder_hidden_states,
                                                  encoder_attention_mask=encoder_attention_mask, cache=cache,
                                                  use_cache=True)
        c = out.cache
        flat = []
        for i in range(self.n):
            s, x = c.self_attention_cache.layers[i], c.cross_attention_cache.layers[i]
            flat += [s.keys, s.values, x.keys, x.values]
        return (self.m.lm_head(out.last_hidden_state), *flat)


class DecPast(torch.nn.Module):
    """decoder_with_past_model.onnx: one more token given the cache -> logits, new self cache."""

    def __init__(self, m, n):
        super().__init__()
        self.m, self.n = m, n

    def forward(self, inputs_embeds, encoder_hidden_states, encoder_attention_mask, *pkv):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        self_c = DynamicCache([(pkv[4 * i], pkv[4 * i + 1]) for i in range(self.n)])
        cross = DynamicCache([(pkv[4 * i + 2], pkv[4 * i + 3]) for i in range(self.n)])
        cache = EncoderDecoderCache(self_c, cross)
        out = self.m.model.language_model.decoder(inputs_embeds=inputs_embeds, encoder_hidden_states=encoder_hidden_states,
                                                  encoder_attention_mask=encoder_attention_mask, cache=cache,
                                                  use_cache=True)
        c = out.cache
        flat = []
        for i in range(self.n):
            s = c.self_attention_cache.layers[i]
            flat += [s.keys, s.values]
        return (self.m.lm_head(out.last_hidden_state), *flat)


def merge(out: Path) -> None:
    """decoder_model_merged.onnx, as onnx-community's exports ship the decoder (one graph,
    `use_cache_branch` picks the branch): optimum's merge of the two decoders."""
    from optimum.onnx import merge_decoders

    merge_decoders(out / "decoder_model.onnx", out / "decoder_with_past_model.onnx", strict=False,
                   save_path=out / "decoder_model_merged.onnx")


def make_florence(out: Path) -> None:
    from transformers import (BartConfig, CLIPImageProcessorPil, Florence2Config, Florence2ForConditionalGeneration,
                              Florence2Processor, Florence2VisionConfig, PreTrainedTokenizerFast)

    tok = tokenizer()
    vocab = tok.get_vocab_size()
    image_id = tok.token_to_id("<image>")
    vision = Florence2VisionConfig(depths=[1, 1], patch_size=[7, 3], patch_stride=[4, 2], patch_padding=[3, 1],
                                   patch_prenorm=[False, True], embed_dim=[16, 32], num_heads=[1, 2], num_groups=[1, 2],
                                   window_size=2, drop_path_rate=0.0, projection_dim=32, max_position_embeddings=16,
                                   max_temporal_embeddings=4, initializer_range=0.1)
    text = BartConfig(vocab_size=vocab, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                      decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                      pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2,
                      scale_embedding=False, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, init_std=0.1)
    cfg = Florence2Config(vision_config=vision.to_dict(), text_config=text.to_dict(), image_token_id=image_id)
    torch.manual_seed(0)
    model = Florence2ForConditionalGeneration(cfg)
    g = model.generation_config
    g.decoder_start_token_id, g.bos_token_id, g.eos_token_id, g.pad_token_id = 2, 0, 2, 1
    g.forced_bos_token_id, g.forced_eos_token_id = 0, 2
    g.num_beams, g.no_repeat_ngram_size, g.early_stopping, g.max_length = 3, 3, True, 64
    size = 64
    image_seq = (size // 8) ** 2 + 1  # the projector's spatial mean token + one per 8x8 cell
    improc = CLIPImageProcessorPil(size={"height": size, "width": size}, do_center_crop=False, resample=3,
                                   image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    improc.image_seq_length = image_seq
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", extra_special_tokens={"image_token": "<image>"})
    processor = Florence2Processor(image_processor=improc, tokenizer=fast,
                                   post_processor_config={"ocr": {"PATTERN": None, "AREA_THRESHOLD": 0.0},
                                                          "pure_text": {}, "description_with_bboxes": {},
                                                          "phrase_grounding": {"banned_grounding_tokens": []},
                                                          "bboxes": {}, "polygons": {},
                                                          "description_with_bboxes_or_polygons": {}})
    img = image()

    def encode(task: str, im: Image.Image):
        return processor(text=task, images=im, return_tensors="pt")

    # ---- a few hundred steps of teacher forcing: the tiny model learns one answer per task
    batch = [(encode(t, img), fast(ans, add_special_tokens=True, return_tensors="pt").input_ids)
             for t, ans in TARGETS.items()]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _step in range(300):
        loss = sum(model(**enc, labels=lab).loss for enc, lab in batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    print("final loss", float(loss))

    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    improc.save_pretrained(out)
    # as the hub's preprocessor_config.json: the processor class and the image token count
    pc = json.loads((out / "preprocessor_config.json").read_text())
    pc.update({"image_processor_type": "CLIPImageProcessor", "processor_class": "Florence2Processor",
               "image_seq_length": image_seq})
    (out / "preprocessor_config.json").write_text(json.dumps(pc, indent=1))
    tok.save(str(out / "tokenizer.json"))
    images = [img, second_image()]
    for i, im in enumerate(images):
        im.save(out / f"image{i}.png")

    pv = torch.cat([improc(images=im, return_tensors="pt").pixel_values for im in images])
    np.save(out / "pixel_values.npy", pv.numpy().astype(np.float32))
    export(Vision(model), (pv,), out / "vision_encoder.onnx", ["pixel_values"], ["image_features"],
           {"pixel_values": {0: "batch"}, "image_features": {0: "batch"}})
    ids = torch.tensor([[0, 5, 6, 2]] * 2)
    export(Embed(model), (ids,), out / "embed_tokens.onnx", ["input_ids"], ["inputs_embeds"],
           {"input_ids": {0: "batch", 1: "seq"}, "inputs_embeds": {0: "batch", 1: "seq"}})
    with torch.no_grad():
        emb = torch.cat([Vision(model)(pv), Embed(model)(ids)], dim=1)
    mask = torch.ones(emb.shape[:2], dtype=torch.int64)
    export(Encoder(model), (emb, mask), out / "encoder_model.onnx", ["inputs_embeds", "attention_mask"],
           ["last_hidden_state"], {"inputs_embeds": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                   "last_hidden_state": {0: "batch", 1: "seq"}})
    with torch.no_grad():
        hidden = Encoder(model)(emb, mask)
        dec_emb = Embed(model)(torch.tensor([[2, 0]] * 2))
    n = 1
    pkv = []
    for i in range(n):
        pkv += [f"present.{i}.decoder.key", f"present.{i}.decoder.value",
                f"present.{i}.encoder.key", f"present.{i}.encoder.value"]
    dyn = {"inputs_embeds": {0: "batch", 1: "seq"}, "encoder_hidden_states": {0: "batch", 1: "enc"},
           "encoder_attention_mask": {0: "batch", 1: "enc"}, "logits": {0: "batch", 1: "seq"}}
    dyn.update({k: {0: "batch", 2: "past" if "decoder" in k else "enc"} for k in pkv})
    export(Dec(model, n), (dec_emb, hidden, mask), out / "decoder_model.onnx",
           ["inputs_embeds", "encoder_hidden_states", "encoder_attention_mask"], ["logits", *pkv], dyn)
    with torch.no_grad():
        first = Dec(model, n)(dec_emb, hidden, mask)
    past_in = [k.replace("present.", "past_key_values.") for k in pkv]
    present_out = [k for k in pkv if "decoder" in k]
    dyn = {"inputs_embeds": {0: "batch"}, "encoder_hidden_states": {0: "batch", 1: "enc"},
           "encoder_attention_mask": {0: "batch", 1: "enc"}, "logits": {0: "batch"}}
    dyn.update({k: {0: "batch", 2: "past_seq"} for k in past_in if "decoder" in k})
    dyn.update({k: {0: "batch", 2: "enc"} for k in past_in if "encoder" in k})
    dyn.update({k: {0: "batch", 2: "total_seq"} for k in present_out})
    export(DecPast(model, n), (dec_emb[:, -1:], hidden, mask, *first[1:]), out / "decoder_with_past_model.onnx",
           ["inputs_embeds", "encoder_hidden_states", "encoder_attention_mask", *past_in], ["logits", *present_out], dyn)

    merge(out)

    # ---- references: generate (greedy and the config's 3 beams), decoded, post-processed
    ref: dict = {"max_new_tokens": 40, "cases": []}
    for bi, im in enumerate(images):
        for task in TARGETS:
            enc = encode(task, im)
            for nb in (1, 3):
                with torch.no_grad():
                    seq = model.generate(**enc, max_new_tokens=40, num_beams=nb, do_sample=False)
                toks = seq[0].tolist()
                raw = processor.batch_decode(seq, skip_special_tokens=False)[0]
                task_key = task if task.startswith("<") and task.endswith(">") else task[:task.index(">") + 1]
                post = processor.post_process_generation(raw, task=task_key, image_size=im.size)
                # the encoder's text ids as the ONNX layout feeds them: <s> prompt </s>, no <image> tokens
                text_ids = [t for t in enc.input_ids[0].tolist() if t != image_id]
                ref["cases"].append({"image": bi, "prompt": task, "num_beams": nb, "text_ids": text_ids,
                                     "tokens": toks, "raw": raw, "post": post})
    (out / "reference.json").write_text(json.dumps(ref, indent=1))
    for c in ref["cases"]:
        if c["image"] == 0:
            print(c["prompt"], c["num_beams"], c["post"])


# ---- Pix2Struct ------------------------------------------------------------------------------
class P2SEnc(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, flattened_patches, attention_mask):
        return self.m.encoder(flattened_patches=flattened_patches, attention_mask=attention_mask).last_hidden_state


class P2SDec(torch.nn.Module):
    """decoder_model.onnx (optimum's Pix2Struct layout): ids -> logits, self and cross cache."""

    def __init__(self, m, n):
        super().__init__()
        self.m, self.n = m, n

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask, decoder_attention_mask):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        out = self.m.decoder(input_ids=input_ids, attention_mask=decoder_attention_mask,
                             encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask,
                             cache=EncoderDecoderCache(DynamicCache(), DynamicCache()), use_cache=True)
        c, flat = out.cache, []
        for i in range(self.n):
            s, x = c.self_attention_cache.layers[i], c.cross_attention_cache.layers[i]
            flat += [s.keys, s.values, x.keys, x.values]
        return (out.logits, *flat)


class P2SDecPast(torch.nn.Module):
    def __init__(self, m, n):
        super().__init__()
        self.m, self.n = m, n

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask, decoder_attention_mask, *pkv):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache([(pkv[4 * i], pkv[4 * i + 1]) for i in range(self.n)]),
                                    DynamicCache([(pkv[4 * i + 2], pkv[4 * i + 3]) for i in range(self.n)]))
        out = self.m.decoder(input_ids=input_ids, attention_mask=decoder_attention_mask,
                             encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask,
                             cache=cache, use_cache=True)
        c, flat = out.cache, []
        for i in range(self.n):
            s = c.self_attention_cache.layers[i]
            flat += [s.keys, s.values]
        return (out.logits, *flat)


def p2s_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # T5's order: <pad>=0 (also the decoder start), </s>=1, <unk>=2
    trainer = trainers.BpeTrainer(vocab_size=280, special_tokens=["<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return tok


def make_pix2struct(out: Path) -> None:
    from PIL import ImageFont
    from transformers import (Pix2StructConfig, Pix2StructForConditionalGeneration, Pix2StructImageProcessorPil,
                              Pix2StructTextConfig, Pix2StructVisionConfig)

    tok = p2s_tokenizer()
    vocab = tok.get_vocab_size()
    ph = 8
    max_patches = 48
    text = Pix2StructTextConfig(vocab_size=vocab, hidden_size=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
                                pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, initializer_factor=1.0)
    vision = Pix2StructVisionConfig(hidden_size=32, patch_embed_hidden_size=ph * ph * 3, d_ff=64, d_kv=16,
                                    num_hidden_layers=1, num_attention_heads=2, seq_len=max_patches, dropout_rate=0.0,
                                    relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                    initializer_factor=1.0)
    cfg = Pix2StructConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), is_vqa=True,
                           decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    model = Pix2StructForConditionalGeneration(cfg).eval()
    g = model.generation_config
    g.decoder_start_token_id, g.pad_token_id, g.eos_token_id = 0, 0, 1
    improc = Pix2StructImageProcessorPil(patch_size={"height": ph, "width": ph}, max_patches=max_patches, is_vqa=True)
    # The hub's processor downloads Arial.TTF at run time; an offline server cannot, so inferd
    # renders headers with a font file in the model folder, else Pillow's built-in one: the
    # fixture's reference uses that built-in one.
    font = ImageFont.load_default(36).font_bytes
    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    improc.save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    images = [image(), second_image()]
    for i, im in enumerate(images):
        im.save(out / f"image{i}.png")
    questions = ["What is the total?", "What type of document is this?"]
    def vqa(im: Image.Image, q: str):
        # The processor's own VQA path (render_header, then patches); transformers 5.24's kwarg
        # validation refuses font_bytes in __call__, so its two steps are called one by one.
        hdr = improc.render_header(np.asarray(im).transpose(2, 0, 1), q, font_bytes=font)
        return improc(images=Image.fromarray(hdr.transpose(1, 2, 0)), is_vqa=False, return_tensors="pt")

    feats = [vqa(im, q) for im in images for q in questions]
    fp = torch.cat([f.flattened_patches for f in feats])
    am = torch.cat([f.attention_mask for f in feats])
    np.save(out / "flattened_patches.npy", fp.numpy().astype(np.float32))
    np.save(out / "attention_mask.npy", am.numpy().astype(np.float32))
    enc = P2SEnc(model)
    export(enc, (fp, am), out / "encoder_model.onnx", ["flattened_patches", "attention_mask"], ["last_hidden_state"],
           {"flattened_patches": {0: "batch"}, "attention_mask": {0: "batch"}, "last_hidden_state": {0: "batch"}})
    with torch.no_grad():
        hidden = enc(fp, am)
    ids = torch.tensor([[0, 5, 6]] * fp.shape[0])
    n = 1
    pkv = []
    for i in range(n):
        pkv += [f"present.{i}.decoder.key", f"present.{i}.decoder.value",
                f"present.{i}.encoder.key", f"present.{i}.encoder.value"]
    # optimum's Pix2Struct decoders also take decoder_attention_mask (past + current length)
    dmask = torch.ones(ids.shape, dtype=torch.int64)
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "encoder_hidden_states": {0: "batch"},
           "encoder_attention_mask": {0: "batch"}, "decoder_attention_mask": {0: "batch", 1: "seq"},
           "logits": {0: "batch", 1: "seq"}}
    dyn.update({k: {0: "batch", 2: "past" if "decoder" in k else "enc"} for k in pkv})
    export(P2SDec(model, n), (ids, hidden, am, dmask), out / "decoder_model.onnx",
           ["input_ids", "encoder_hidden_states", "encoder_attention_mask", "decoder_attention_mask"],
           ["logits", *pkv], dyn)
    with torch.no_grad():
        first = P2SDec(model, n)(ids, hidden, am, dmask)
    past_in = [k.replace("present.", "past_key_values.") for k in pkv]
    present_out = [k for k in pkv if "decoder" in k]
    dyn = {"input_ids": {0: "batch"}, "encoder_hidden_states": {0: "batch"}, "encoder_attention_mask": {0: "batch"},
           "decoder_attention_mask": {0: "batch", 1: "total_seq"}, "logits": {0: "batch"}}
    dyn.update({k: {0: "batch", 2: "past_seq"} for k in past_in if "decoder" in k})
    dyn.update({k: {0: "batch"} for k in past_in if "encoder" in k})
    dyn.update({k: {0: "batch", 2: "total_seq"} for k in present_out})
    export(P2SDecPast(model, n), (ids[:, -1:], hidden, am, torch.ones((ids.shape[0], ids.shape[1] + 1), dtype=torch.int64),
                                  *first[1:]), out / "decoder_with_past_model.onnx",
           ["input_ids", "encoder_hidden_states", "encoder_attention_mask", "decoder_attention_mask", *past_in],
           ["logits", *present_out], dyn)
    merge(out)
    ref: dict = {"max_new_tokens": 12, "questions": questions, "cases": []}
    k = 0
    for bi in range(len(images)):
        for q in questions:
            f = feats[k]
            k += 1
            for nb in (1, 2):
                with torch.no_grad():
                    seq = model.generate(flattened_patches=f.flattened_patches, attention_mask=f.attention_mask,
                                         max_new_tokens=12, num_beams=nb, do_sample=False, early_stopping=nb > 1)
                ref["cases"].append({"image": bi, "prompt": q, "num_beams": nb, "row": k - 1, "tokens": seq[0].tolist()})
    # The same weights read as a captioning (not VQA) model: no header, no prompt.
    ref["plain"] = []
    for bi, im in enumerate(images):
        f = improc(images=im, is_vqa=False, return_tensors="pt")
        with torch.no_grad():
            seq = model.generate(flattened_patches=f.flattened_patches, attention_mask=f.attention_mask,
                                 max_new_tokens=12, do_sample=False)
        ref["plain"].append({"image": bi, "tokens": seq[0].tolist(),
                             "n_patches": int(f.attention_mask.sum()),
                             "patches_sum": float(f.flattened_patches.double().sum())})
    (out / "reference.json").write_text(json.dumps(ref, indent=1))
    print(ref["cases"][:2], ref["plain"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "readers"))
    ap.add_argument("--only", choices=["florence2", "pix2struct"])
    ap.add_argument("--merge-only", action="store_true", help="only (re)write the merged decoders")
    a = ap.parse_args()
    if a.merge_only:
        for name in ("florence2", "pix2struct"):
            merge(Path(a.out) / f"{name}-tiny")
        return
    for name, fn in (("florence2", make_florence), ("pix2struct", make_pix2struct)):
        if a.only and a.only != name:
            continue
        d = Path(a.out) / f"{name}-tiny"
        shutil.rmtree(d, ignore_errors=True)
        fn(d)
        print("wrote", d, sum(p.stat().st_size for p in d.iterdir()) // 1024, "KiB")


if __name__ == "__main__":
    main()
