"""ONNX graphs made at load time, so no torch is needed at run time:

- `bert_from_safetensors`: a BERT encoder (optionally with its masked-LM head) built from a
  Hugging Face `model.safetensors` + `config.json` (the splade-tiny built-in ships only those).
  Building the graph takes well under a second and runs on onnxruntime, several times faster
  than the same forward pass in numpy (docs/benchmarks.md, Embeddings).
- `with_splade_head`: appends SPLADE pooling to a graph with masked-LM logits, so the
  [batch, seq, vocab] logits never leave onnxruntime; the output is [batch, vocab].
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from inferd.errors import ModelLoadFailed

SPLADE_OUTPUT = "splade_vector"
_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "F64": np.float64, "I64": np.int64}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The safetensors format: 8-byte little-endian header size, a JSON header, raw tensors."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[base + a: base + b]
        if info["dtype"] == "BF16":  # widen bfloat16 to float32 by hand: numpy has no bf16
            arr = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif _DTYPES.get(info["dtype"]) is not None:
            arr = np.frombuffer(buf, _DTYPES[info["dtype"]])
        else:
            raise ModelLoadFailed(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        out[name] = arr.reshape(info["shape"]).astype(np.float32) if arr.dtype.kind == "f" else arr
    return out


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def const(self, arr: Any, name: str | None = None) -> str:
        self.n += 1
        name = name or f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, kind: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        self.n += 1
        out = out or f"{kind.lower()}_{self.n}"
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(self, x: str, w: np.ndarray, b: np.ndarray) -> str:
        # Hugging Face Linear stores [out, in]; MatMul wants [in, out].
        return self.op("Add", [self.op("MatMul", [x, self.const(np.ascontiguousarray(w.T))]), self.const(b)])

    def layer_norm(self, x: str, g: np.ndarray, b: np.ndarray, eps: float) -> str:
        return self.op("LayerNormalization", [x, self.const(g), self.const(b)], axis=-1, epsilon=eps)

    def gelu(self, x: str) -> str:  # exact (erf) GELU, as BERT's "gelu"
        inner = self.op("Erf", [self.op("Div", [x, self.const(np.float32(math.sqrt(2.0)))])])
        return self.op("Mul", [self.op("Mul", [x, self.const(np.float32(0.5))]),
                               self.op("Add", [inner, self.const(np.float32(1.0))])])


def _getter(w: dict[str, np.ndarray]):
    prefix = "bert." if any(k.startswith("bert.") for k in w) else ""

    def get(name: str, root: bool = False) -> np.ndarray:
        key = name if root else prefix + name
        for cand in (key, key.replace(".weight", ".gamma").replace(".bias", ".beta")):
            if cand in w:
                return w[cand]
        raise ModelLoadFailed(f"safetensors weights lack {key}")
    return get


def bert_from_safetensors(path: Path, config: dict[str, Any], mlm_head: bool, splade: bool = False) -> bytes:
    if config.get("model_type", "bert") != "bert":
        raise ModelLoadFailed(f"only BERT safetensors models can be served without an ONNX export "
                              f"(model_type is {config.get('model_type')!r})")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ModelLoadFailed(f"unsupported hidden_act {config.get('hidden_act')!r}")
    w = read_safetensors(path)
    get = _getter(w)
    E, H = int(config["hidden_size"]), int(config["num_attention_heads"])
    L, eps = int(config["num_hidden_layers"]), float(config.get("layer_norm_eps", 1e-12))
    g = _Builder()
    i64 = lambda *v: g.const(np.array(v, np.int64))  # noqa: E731
    seq = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(np.array(1, np.int64))], axis=0)
    pos = g.op("Range", [g.const(np.array(0, np.int64)), seq, g.const(np.array(1, np.int64))])
    x = g.op("Add", [g.op("Gather", [g.const(get("embeddings.word_embeddings.weight"), "word_embeddings"),
                                     "input_ids"]),
                     g.op("Gather", [g.const(get("embeddings.position_embeddings.weight")), pos])])
    x = g.op("Add", [x, g.op("Gather", [g.const(get("embeddings.token_type_embeddings.weight")), "token_type_ids"])])
    x = g.layer_norm(x, get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"), eps)
    maskf = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = g.op("Mul", [g.op("Sub", [g.const(np.float32(1.0)), maskf]),
                        g.const(np.float32(np.finfo(np.float32).min))])
    bias = g.op("Unsqueeze", [bias, i64(1, 2)])  # [B,1,1,S]
    heads = lambda t: g.op("Transpose", [g.op("Reshape", [t, i64(0, 0, H, E // H)])], perm=[0, 2, 1, 3])  # noqa: E731
    for i in range(L):
        p = f"encoder.layer.{i}."
        lin = lambda x_, n, p=p: g.linear(x_, get(p + n + ".weight"), get(p + n + ".bias"))  # noqa: E731
        q, k, v = (heads(lin(x, f"attention.self.{n}")) for n in ("query", "key", "value"))
        s = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                         g.const(np.float32(1.0 / math.sqrt(E // H)))])
        ctx = g.op("MatMul", [g.op("Softmax", [g.op("Add", [s, bias])], axis=-1), v])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), i64(0, 0, E)])
        x = g.layer_norm(g.op("Add", [x, lin(ctx, "attention.output.dense")]),
                         get(p + "attention.output.LayerNorm.weight"), get(p + "attention.output.LayerNorm.bias"), eps)
        ff = lin(g.gelu(lin(x, "intermediate.dense")), "output.dense")
        x = g.layer_norm(g.op("Add", [x, ff]), get(p + "output.LayerNorm.weight"), get(p + "output.LayerNorm.bias"), eps)
    B, S = "batch", "seq"
    outputs = []
    if mlm_head:
        t = g.linear(x, get("cls.predictions.transform.dense.weight", True),
                     get("cls.predictions.transform.dense.bias", True))
        t = g.layer_norm(g.gelu(t), get("cls.predictions.transform.LayerNorm.weight", True),
                         get("cls.predictions.transform.LayerNorm.bias", True), eps)
        dec = w.get("cls.predictions.decoder.weight")
        # Tied weights (the usual case): the decoder is the word embedding table, transposed.
        dec_w = g.op("Transpose", ["word_embeddings"], perm=[1, 0]) if dec is None else g.const(dec.T.copy())
        b = w.get("cls.predictions.bias", w.get("cls.predictions.decoder.bias"))
        g.op("Add", [g.op("MatMul", [t, dec_w]), g.const(b)], out="logits")
        outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, S, int(config["vocab_size"])]))
    else:
        g.op("Identity", [x], out="last_hidden_state")
        outputs.append(helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [B, S, E]))
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [B, S])
              for n in ("input_ids", "attention_mask", "token_type_ids")]
    model = helper.make_model(helper.make_graph(g.nodes, "bert", inputs, outputs, g.inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if splade:
        model = with_splade_head(model, "logits")
    return model.SerializeToString()


def with_splade_head(model: onnx.ModelProto | Path, logits: str = "logits") -> onnx.ModelProto:
    """Append max over tokens of log(1 + relu(logits)) * mask, as output SPLADE_OUTPUT [B, V]."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    graph = model.graph
    names = {o.name for o in graph.output}
    if logits not in names:
        raise ModelLoadFailed(f"a sparse model needs a '{logits}' output (masked-LM logits); graph has {sorted(names)}")
    if "attention_mask" not in {i.name for i in graph.input}:
        raise ModelLoadFailed("a sparse model needs an attention_mask input")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "splade_one")
    axis = numpy_helper.from_array(np.array([2], np.int64), "splade_axis")
    graph.initializer.extend([one, axis])
    graph.node.extend([
        helper.make_node("Relu", [logits], ["splade_relu"]),
        helper.make_node("Add", ["splade_relu", "splade_one"], ["splade_plus1"]),
        helper.make_node("Log", ["splade_plus1"], ["splade_log"]),
        helper.make_node("Cast", ["attention_mask"], ["splade_maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["splade_maskf", "splade_axis"], ["splade_mask3"]),
        helper.make_node("Mul", ["splade_log", "splade_mask3"], ["splade_masked"]),
        helper.make_node("ReduceMax", ["splade_masked"], [SPLADE_OUTPUT], axes=[1], keepdims=0),
    ])
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    if opset >= 18:  # ReduceMax takes axes as an input from opset 18 on
        graph.node[-1].CopyFrom(helper.make_node("ReduceMax", ["splade_masked", "splade_axes1"], [SPLADE_OUTPUT],
                                                 keepdims=0))
        graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "splade_axes1"))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(SPLADE_OUTPUT, TensorProto.FLOAT, ["batch", "vocab"]))
    return model
