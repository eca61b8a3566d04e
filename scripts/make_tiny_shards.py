"""Split the tiny llama fixture into a real multi-shard GGUF (llama.cpp's split format:
`split.no`, `split.count`, `split.tensors.count` keys, files named NAME-0000i-of-0000n.gguf)
with a ChatML chat template added, for the download tests' fake Hub. The weights stay F32;
the fake Hub serves these bytes under quantization names, which only the picker reads.

    python scripts/make_tiny_shards.py tests/fixtures/gguf/tiny-llama.gguf tests/fixtures/gguf/shards
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def main(src: Path, out_dir: Path, shards: int = 3) -> list[Path]:
    reader = gguf.GGUFReader(src)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    per = -(-len(reader.tensors) // shards)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("tiny-*.gguf"):
        old.unlink()
    w = gguf.GGUFWriter(out_dir / "tiny.gguf", arch, split_max_tensors=per)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.Tokenizer.CHAT_TEMPLATE:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    w.add_chat_template(CHATML)
    for t in reader.tensors:
        w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sorted(out_dir.glob("tiny-*.gguf"))


if __name__ == "__main__":
    for p in main(Path(sys.argv[1]), Path(sys.argv[2])):
        print(p, p.stat().st_size)
