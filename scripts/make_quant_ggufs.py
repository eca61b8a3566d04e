"""Quantized tiny GGUFs, so the tests run the kernels users run (quantized matmuls), not only F32.

    python scripts/make_quant_ggufs.py tests/fixtures/gguf/quant

Writes, with llama.cpp's own quantizer (llama_model_quantize, as `llama-quantize` does):
- tiny-q4_0.gguf, tiny-q4_1.gguf, tiny-q8_0.gguf: tests/fixtures/gguf/tiny-llama.gguf (64 wide,
  so every row is a whole number of 32-value blocks) quantized to Q4_0, Q4_1 and Q8_0;
- tiny-q4_k.gguf: a 256-wide variant of the same recipe (make_tiny_gguf.py's code and seed,
  wider: K-quants use 256-value super-blocks, and a 64-wide row would fall back to Q5_0),
  quantized to Q4_K_M; the F32 original is made in a temp folder and not kept.

Deterministic: the F32 inputs come from fixed seeds and llama.cpp's quantizer is deterministic.
needs: llama-cpp-python, gguf, numpy (the models + test extras)."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import llama_cpp as L

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FTYPES = {"q4_0": L.LLAMA_FTYPE_MOSTLY_Q4_0, "q4_1": L.LLAMA_FTYPE_MOSTLY_Q4_1,
          "q8_0": L.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_k": L.LLAMA_FTYPE_MOSTLY_Q4_K_M}


def quantize(src: Path, dst: Path, ftype: int) -> None:
    params = L.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 1
    rc = L.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({src} -> {dst}) failed: {rc}")


def wide_f32(out: Path) -> None:
    """make_tiny_gguf.py's model at 256 wide (4 heads of 64, FFN 512), same vocabulary and seed."""
    spec = importlib.util.spec_from_file_location("make_tiny_gguf", HERE / "make_tiny_gguf.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader
    spec.loader.exec_module(mod)
    mod.N_EMBD, mod.N_FF = 256, 512
    mod.main(str(out))


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    base = ROOT / "tests" / "fixtures" / "gguf" / "tiny-llama.gguf"
    for name in ("q4_0", "q4_1", "q8_0"):
        quantize(base, out / f"tiny-{name}.gguf", FTYPES[name])
    with tempfile.TemporaryDirectory() as tmp:
        wide = Path(tmp) / "tiny-wide-f32.gguf"
        wide_f32(wide)
        quantize(wide, out / "tiny-q4_k.gguf", FTYPES["q4_k"])
    for p in sorted(out.glob("tiny-q*.gguf")):
        print(p, p.stat().st_size)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "tests" / "fixtures" / "gguf" / "quant"))
