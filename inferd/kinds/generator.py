"""Generators: GGUF weights on llama.cpp (runtimes/llama_cpp) in a continuous-batching
engine (scheduling/generation.py), with a draft model for speculation on demand. Found as
`generators/<name>.gguf` or a folder of them; a projector (mmproj*.gguf) beside the weights
makes it a vision model, a loras/ folder gives it adapters. A folder in onnxruntime-genai's
layout (genai_config.json + model.onnx) is an ONNX generator (format `onnx`), served by
onnxruntime-genai (runtimes/onnx_genai, scheduling/genai.py; docs/generators-onnx.md)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from inferd.errors import ModelLoadFailed, NotImplementedYet
from inferd.kinds.spec import KindSpec, folder_of
from inferd.models import ModelKind, ModelSpec

if TYPE_CHECKING:
    from inferd.runtimes.options import RuntimeOptions
    from inferd.service.handles import GeneratorHandle


def load(spec: ModelSpec, opts: RuntimeOptions) -> GeneratorHandle:
    from inferd.chat.templates import BUILTIN_TEMPLATES
    from inferd.runtimes.llama_cpp import load_generator
    from inferd.scheduling.disk_cache import DiskCache
    from inferd.scheduling.generation import GenerationEngine
    from inferd.service.handles import GeneratorHandle

    backend = load_generator(spec, opts, BUILTIN_TEMPLATES)  # gemma GGUFs ship no template
    disk = None
    if opts.cache_dir and opts.cache_disk_size > 0:  # scheduling/disk_cache.py
        try:
            disk = DiskCache(Path(opts.cache_dir), opts.cache_disk_size, backend.cache_identity,
                             reuse_floor=backend.reuse_floor)
        except OSError as e:
            backend.close()
            raise ModelLoadFailed(f"model '{spec.name}': cannot use --cache-dir {opts.cache_dir}: {e}") from e
    engine = GenerationEngine(backend, name=spec.name, max_waiting=opts.max_waiting, host_cache_bytes=opts.cache_ram,
                              disk_cache=disk, ngram_pool=opts.spec_pool_entries, auto_ngram=opts.spec_auto)
    handle = GeneratorHandle(backend, engine, make_draft=functools.partial(_draft, backend, opts))
    try:
        handle.warm_up()
    except BaseException:
        handle.close()
        raise
    return handle


def load_onnx(spec: ModelSpec, opts: RuntimeOptions) -> GeneratorHandle:
    """A generator in onnxruntime-genai's layout (genai_config.json + model.onnx): the runtime in
    runtimes/onnx_genai, stepped by its own scheduler (scheduling/genai.py), which keeps the llama.cpp
    engine's job and streaming contract, so the service and every face drive it unchanged."""
    from inferd.chat.lark import gbnf_to_lark
    from inferd.runtimes.onnx_genai import is_genai_folder, load_generator as load_genai
    from inferd.scheduling.genai import GenaiScheduler
    from inferd.service.handles import GeneratorHandle

    if spec.path is None or not is_genai_folder(spec.path):
        raise NotImplementedYet(f"model '{spec.name}': an ONNX generator is a folder in onnxruntime-genai's layout "
                              "(genai_config.json, model.onnx, tokenizer.json); "
                              f"{spec.path} has no genai_config.json")
    rt = load_genai(spec, opts, gbnf_to_lark)
    try:
        scheduler = GenaiScheduler(rt, name=spec.name, max_waiting=opts.max_waiting)
    except BaseException:
        rt.close()
        raise
    # the handle's types name the llama.cpp engine; this scheduler keeps its contract (duck-typed)
    handle = GeneratorHandle(cast(Any, rt), cast(Any, scheduler))
    try:
        handle.warm_up()
    except BaseException:
        handle.close()
        raise
    return handle


def _draft(target: Any, opts: RuntimeOptions, dspec: ModelSpec) -> Any:
    """A draft model for `target`'s speculation: its own copy of the weights and a context with
    one sequence per target slot, each as long as the target's (llama_cpp/draft.py)."""
    from inferd.runtimes.llama_cpp.draft import load_draft

    return load_draft(dspec, target, opts)


def describe(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The openai-server's rule: a projector beside the model is its vision tower."""
    if path.is_dir() and not manifest.get("mmproj"):
        projectors = sorted(path.glob("mmproj*.gguf"))
        if projectors:
            return {**manifest, "mmproj": projectors[0].name}
    return manifest


def capabilities(fmt: str, path: Path, manifest: dict[str, Any]) -> set[str]:
    caps = {"chat", "completion"}
    if path.is_dir() and (folder_of(path) / "loras").is_dir():
        caps.add("lora")
    if manifest.get("mmproj") or (path.is_dir() and any(path.glob("mmproj*.gguf"))):
        caps.add("vision")
    return caps


GENERATOR: KindSpec[GeneratorHandle] = KindSpec(
    ModelKind.GENERATOR, {"gguf": load, "onnx": load_onnx}, folder="generators", formats=("gguf",), describe=describe,
    capabilities=capabilities, pipeline_tags=("text-generation", "image-text-to-text"), pull_formats=("gguf",),
    faces=frozenset({"openai", "ollama", "antfly"}), load_overhead=1.25, observe="engine")
