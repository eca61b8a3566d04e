"""Tiny random-weight multimodal projector (mmproj) GGUF for the tiny llama fixture: a 2-layer
ViT (32x32 images, 8x8 patches -> 16 image tokens) with a LLaVA-style MLP projector to the
text model's 64-dim embeddings, in the layout llama.cpp's clip loader reads (tools/mtmd/clip.cpp
in the llama.cpp tree vendored by llama-cpp-python 0.3.36: keys `clip.*`, tensors `v.*`, `mm.*`).
F32 weights, so encoding is deterministic.

Regenerate the committed fixture (deterministic, seed 0):
    python scripts/make_tiny_mmproj.py tests/fixtures/gguf/mmproj-tiny.gguf
needs: pip install gguf numpy"""
import sys

import gguf
import numpy as np

TEXT_EMBD = 64                  # tiny-llama.gguf's embedding_length
N_EMBD, N_HEAD, N_FF, N_LAYER = 32, 2, 64, 2
IMAGE, PATCH = 32, 8
N_PATCHES = (IMAGE // PATCH) ** 2


def main(out: str, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)

    def w(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    g = gguf.GGUFWriter(out, "clip")
    g.add_string("general.name", "tiny-mmproj")
    g.add_string("clip.projector_type", "mlp")
    g.add_bool("clip.has_vision_encoder", True)
    g.add_bool("clip.has_text_encoder", False)
    g.add_bool("clip.use_gelu", True)
    g.add_uint32("clip.vision.embedding_length", N_EMBD)
    g.add_uint32("clip.vision.feed_forward_length", N_FF)
    g.add_uint32("clip.vision.block_count", N_LAYER)
    g.add_uint32("clip.vision.projection_dim", TEXT_EMBD)
    g.add_uint32("clip.vision.attention.head_count", N_HEAD)
    g.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    g.add_uint32("clip.vision.image_size", IMAGE)
    g.add_uint32("clip.vision.patch_size", PATCH)
    g.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    g.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    # numpy shapes are ggml's dims reversed: a [in -> out] matrix is (out, in).
    g.add_tensor("v.patch_embd.weight", w(N_EMBD, 3, PATCH, PATCH))
    g.add_tensor("v.patch_embd.bias", w(N_EMBD))
    g.add_tensor("v.class_embd", w(N_EMBD))
    g.add_tensor("v.position_embd.weight", w(N_PATCHES + 1, N_EMBD))
    g.add_tensor("v.pre_ln.weight", np.ones(N_EMBD, np.float32))
    g.add_tensor("v.pre_ln.bias", np.zeros(N_EMBD, np.float32))
    for i in range(N_LAYER):
        p = f"v.blk.{i}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            g.add_tensor(p + name + ".weight", w(N_EMBD, N_EMBD))
            g.add_tensor(p + name + ".bias", w(N_EMBD, scale=0.02))
        for ln in ("ln1", "ln2"):
            g.add_tensor(p + ln + ".weight", np.ones(N_EMBD, np.float32))
            g.add_tensor(p + ln + ".bias", np.zeros(N_EMBD, np.float32))
        g.add_tensor(p + "ffn_up.weight", w(N_FF, N_EMBD))
        g.add_tensor(p + "ffn_up.bias", w(N_FF, scale=0.02))
        g.add_tensor(p + "ffn_down.weight", w(N_EMBD, N_FF))
        g.add_tensor(p + "ffn_down.bias", w(N_EMBD, scale=0.02))
    g.add_tensor("mm.0.weight", w(TEXT_EMBD, N_EMBD))
    g.add_tensor("mm.0.bias", w(TEXT_EMBD, scale=0.02))
    g.add_tensor("mm.2.weight", w(TEXT_EMBD, TEXT_EMBD))
    g.add_tensor("mm.2.bias", w(TEXT_EMBD, scale=0.02))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


if __name__ == "__main__":
    main(sys.argv[1])
