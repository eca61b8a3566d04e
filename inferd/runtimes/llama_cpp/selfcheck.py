"""A self-check instead of a dead server: can this llama.cpp build run this model type on this CPU?

llama-cpp-python compiles llama.cpp for the machine it is built on. A kernel the CPU (or its
hypervisor) does not run kills the whole process with SIGILL at the first matmul of that type:
AMX tiles on Intel Xeons whose hypervisor does not grant the tile state (llama.cpp #26954,
#28328), or a wheel built on another CPU. So the first time a build serves a quantization type
(the GGUF's `general.file_type`: Q4_K_M, Q8_0, F32, ...), a child process loads the model and
decodes a small batch and one token with it. A child that dies by a signal makes that type
refused with a clear error (CpuUnsupported: which CPU feature, which build, the rebuild
command) while everything else keeps serving. The verdict is cached per build and CPU
(`build_key`), so the probe runs once, not per load.

The child is probe.py: `python -m inferd.runtimes.llama_cpp.probe MODEL.gguf THREADS`."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import mmap
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from inferd.errors import CpuUnsupported

log = logging.getLogger("inferd.llama")

PROBE_TIMEOUT_S = 300.0
# The command that runs the child; tests swap it for one that really dies by a signal.
PROBE_CMD: list[str] = [sys.executable, "-m", "inferd.runtimes.llama_cpp.probe"]
LLAMA_VERSION = "0.3.36"  # pinned in pyproject; the rebuild command names it

# llama.h's enum llama_ftype (general.file_type): the names llama-quantize uses.
FTYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
          11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
          18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
          25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
          32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE"}
# llama_print_system_info's names -> /proc/cpuinfo flags, to say which feature the CPU lacks.
_CPU_FLAG = {"SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
             "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
             "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8"}
REBUILD = ("CMAKE_ARGS=\"-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' "
           "-DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'\" pip install --force-reinstall "
           f"--no-deps --no-cache-dir llama-cpp-python=={LLAMA_VERSION}   (in a checkout: "
           "bash scripts/install_llama.sh .venv)")


# ---- facts about this build and CPU ------------------------------------------------------------
@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: tuple[str, ...]


def cpu_info() -> CpuInfo:
    """The CPU's model name and flags, from /proc/cpuinfo (no flags elsewhere)."""
    name, flags = "", list[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not name:
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = value.split()
            if name and flags:
                break
    except OSError:
        pass
    return CpuInfo(name or os.uname().machine, tuple(flags))


@cache
def system_info() -> str:
    """llama.cpp's own line about this build: `CPU : SSE3 = 1 | AVX = 1 | ... | AMX_INT8 = 1 |`."""
    import llama_cpp as L

    raw = L.llama_print_system_info()
    return (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)).strip()


def build_features(info: str | None = None) -> list[str]:
    """The CPU features this build's kernels use (those llama.cpp reports as `NAME = 1`)."""
    out = []
    for part in (info if info is not None else system_info()).replace("|", "\n").splitlines():
        name, _, value = part.partition("=")
        name = name.strip().split(":")[-1].strip()
        if value.strip() == "1" and name:
            out.append(name)
    return out


def _library_file() -> str:
    import llama_cpp.llama_cpp as low

    lib = getattr(low, "_lib", None)
    return str(getattr(lib, "_name", "") or "")


@cache
def build_key() -> str:
    """One key per llama.cpp build (version, compiled features, the library file) and CPU."""
    import llama_cpp as L

    lib = _library_file()
    try:
        st = os.stat(lib)
        lib_id = f"{lib}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        lib_id = lib
    cpu = cpu_info()
    text = "\n".join([L.__version__, system_info(), lib_id, cpu.model, " ".join(cpu.flags)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    env = os.environ.get("INFERD_SELFCHECK_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inferd" / "selfcheck"


_types: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> file_type(): read once per file


def file_type(path: Path) -> str:
    """The GGUF's quantization type name, read once per file as it is (a start that prefetches
    the built-in chat model checks it there, and the load checks it again)."""
    try:
        st = Path(path).stat()
    except OSError:
        return _read_file_type(path)  # no such file: whatever it says, not remembered
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _types:
        _types[key] = _read_file_type(path)
    return _types[key]


def _read_file_type(path: Path) -> str:
    """The GGUF's quantization type name (`general.file_type`). Read from the file's header in
    Python (a few tens of ms): a vocabulary-only load through llama.cpp took a second or more
    on each load of a model with a large vocabulary (gemma's 262k tokens) before the real load
    read it all again. A header without the key (hand-made GGUFs, or a file that is no model)
    goes through llama.cpp as before: such a file is its own type, checked once per file name
    and size, and one llama.cpp cannot read is "unknown" (the real load says why)."""
    try:
        value = _header_value(path, b"general.file_type")
    except (OSError, ValueError, struct.error):
        value = None
    if isinstance(value, int) and not isinstance(value, bool):
        return FTYPES.get(value, f"ftype{value}")
    if isinstance(value, str):
        return FTYPES.get(int(value), f"ftype{value}") if value.isdigit() else value
    return _file_type_by_llama(path)


def _file_type_by_llama(path: Path) -> str:
    import ctypes

    import llama_cpp as L

    from inferd.runtimes.llama_cpp.model import init_backend

    init_backend()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        return "unknown"  # the real load reports why
    try:
        buf = ctypes.create_string_buffer(32)
        n = L.llama_model_meta_val_str(model, b"general.file_type", buf, len(buf))
        if n < 0:
            return f"file:{path.name}:{path.stat().st_size}"
        value = buf.value.decode()
        return FTYPES.get(int(value), f"ftype{value}") if value.isdigit() else value
    finally:
        L.llama_model_free(model)


# GGUF value types (gguf.h): the fixed-size scalars by struct format, 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAX_KV, _MAX_ARRAY = 100_000, 50_000_000  # bounds of a sane header


def _header_value(path: Path, wanted: bytes) -> int | float | str | None:
    """One scalar or string key of a GGUF header, None when absent. The keys before it are
    skipped over a read-only map of the file (arrays by their element sizes), so no more of the
    file is read than the header up to that key; a malformed header raises ValueError."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        end = len(mm)

        def at(fmt: str, off: int) -> tuple:
            if off + struct.calcsize(fmt) > end:
                raise ValueError("truncated GGUF header")
            return struct.unpack_from(fmt, mm, off)

        if mm[:4] != b"GGUF" or at("<I", 4)[0] < 2:
            raise ValueError("not a GGUF file")
        _tensors, n_kv = at("<QQ", 8)
        if n_kv > _MAX_KV:
            raise ValueError("too many GGUF keys")
        off = 24
        for _ in range(n_kv):
            (n,) = at("<Q", off)
            key = mm[off + 8:off + 8 + n]
            off += 8 + n
            (vtype,) = at("<I", off)
            off += 4
            if vtype in _SCALARS:
                if key == wanted:
                    return at(_SCALARS[vtype], off)[0]
                off += struct.calcsize(_SCALARS[vtype])
            elif vtype == 8:
                (n,) = at("<Q", off)
                if key == wanted:
                    return mm[off + 8:off + 8 + n].decode("utf-8", "replace")
                off += 8 + n
            elif vtype == 9:
                itype, n = at("<IQ", off)
                off += 12
                if n > _MAX_ARRAY:
                    raise ValueError("GGUF array too long")
                if itype in _SCALARS:
                    off += n * struct.calcsize(_SCALARS[itype])
                elif itype == 8:
                    unpack = struct.Struct("<Q").unpack_from
                    for _ in range(n):
                        if off + 8 > end:
                            raise ValueError("truncated GGUF header")
                        off += 8 + unpack(mm, off)[0]
                else:
                    raise ValueError(f"GGUF array of type {itype}")
            else:
                raise ValueError(f"unknown GGUF value type {vtype}")
            if off > end:
                raise ValueError("truncated GGUF header")
    return None


# ---- verdicts ----------------------------------------------------------------------------------
class SelfCheck:
    """Verdicts of one build on one CPU, one JSON file: {type: {"ok", "signal", "model", "at"}}."""

    def __init__(self, folder: Path | None = None, key: str | None = None):
        self.path = (folder or cache_dir()) / f"{key or build_key()}.json"
        self._lock = threading.Lock()
        self._type_locks: dict[str, threading.Lock] = {}

    def verdicts(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _record(self, qtype: str, verdict: dict) -> None:
        with self._lock:
            data = self.verdicts()  # another process may have added types meanwhile
            data[qtype] = verdict
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".selfcheck-")
                with os.fdopen(fd, "w") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            except OSError as e:  # a read-only home: the probe runs again next start, no harm
                log.warning("could not record the llama.cpp self-check in %s: %s", self.path, e)

    def require(self, path: Path, n_threads: int = 1, name: str | None = None) -> str:
        """Raise CpuUnsupported when this build cannot run `path`'s type here; else its type."""
        qtype = file_type(path)
        if qtype == "unknown":
            return qtype  # not a model llama.cpp can read: the real load says why
        with self._lock:
            type_lock = self._type_locks.setdefault(qtype, threading.Lock())
        with type_lock:  # two loads of one new type probe once
            verdict = self.verdicts().get(qtype)
            if verdict is None:
                verdict = self._probe(path, qtype, n_threads)
        if verdict is not None and not verdict.get("ok", True):
            raise CpuUnsupported(refusal(name or path.name, qtype, str(verdict.get("signal"))))
        return qtype

    def _probe(self, path: Path, qtype: str, n_threads: int) -> dict | None:
        started = time.monotonic()
        try:
            proc = subprocess.run([*PROBE_CMD, str(path), str(max(1, n_threads))], capture_output=True,
                                  timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            log.warning("llama.cpp self-check of %s (%s) did not finish in %.0f s; not recorded", path.name,
                        qtype, PROBE_TIMEOUT_S)
            return None
        took = time.monotonic() - started
        if proc.returncode < 0:  # killed by a signal: the kernels of this type do not run here
            sig = _signal_name(-proc.returncode)
            verdict = {"ok": False, "signal": sig, "model": str(path), "at": int(time.time())}
            log.error("llama.cpp self-check: a %s decode died with %s on this CPU; %s models are refused",
                      qtype, sig, qtype)
            self._record(qtype, verdict)
            return verdict
        if proc.returncode != 0:  # the model itself failed (a bad file): the real load says why
            log.warning("llama.cpp self-check of %s exited %d: %s", path.name, proc.returncode,
                        proc.stderr.decode("utf-8", "replace")[-300:].strip())
            return None
        verdict = {"ok": True, "model": str(path), "at": int(time.time()), "seconds": round(took, 3)}
        log.info("llama.cpp self-check: %s runs on this CPU (%.2f s)", qtype, took)
        self._record(qtype, verdict)
        return verdict


_checkers: dict[Path, SelfCheck] = {}
_checkers_lock = threading.Lock()


def checker() -> SelfCheck:
    """The process's SelfCheck for the current cache folder (INFERD_SELFCHECK_DIR, else the user cache)."""
    folder = cache_dir()
    with _checkers_lock:
        if folder not in _checkers:
            _checkers[folder] = SelfCheck(folder)
        return _checkers[folder]


def require(path: Path, n_threads: int = 1, name: str | None = None) -> str | None:
    """The load-time gate (generator.py, draft.py). INFERD_LLAMA_SELFCHECK=0 turns it off."""
    if os.environ.get("INFERD_LLAMA_SELFCHECK", "1") == "0":
        return None
    return checker().require(path, n_threads, name)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def refusal(name: str, qtype: str, sig: str) -> str:
    """The error a refused model gets: the feature, the build, the exact rebuild command."""
    cpu = cpu_info()
    flags = set(cpu.flags)
    feats = build_features()
    missing = [f for f in feats if f in _CPU_FLAG and _CPU_FLAG[f] not in flags]
    if missing:
        why = f"this build uses {', '.join(missing)}, which this CPU does not list"
    elif "AMX_INT8" in feats:
        why = ("this build has llama.cpp's AMX kernels, and this CPU lists AMX but the kernel or hypervisor "
               "does not let the process use the tile state")
    else:
        why = "an instruction this build was compiled with does not run here (a wheel built on another CPU?)"
    return (f"model '{name}' ({qtype}) cannot run with this llama.cpp build on this CPU: a test decode of "
            f"{qtype} in a child process died with {sig}; {why}. CPU: {cpu.model}. Build: "
            f"llama-cpp-python {LLAMA_VERSION}, {system_info()[:300]}. Rebuild without AMX: {REBUILD}; then "
            f"delete {cache_dir()} to check again")
