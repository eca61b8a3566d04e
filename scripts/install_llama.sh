#!/usr/bin/env bash
# Builds llama-cpp-python for the CPU of this machine and installs it into the venv given as $1.
#
# Why a script and not a plain `pip install`:
# - llama-cpp-python builds llama.cpp with GGML_NATIVE (-march=native). On Intel Xeons with AMX
#   that compiles ggml's AMX kernels, which die with SIGILL on hypervisors that do not grant
#   the tile state (llama.cpp #26954, #28328). We keep -march=native (AVX-512, VNNI, ... are what
#   make quantized matmuls fast) and take the AMX ISA away with -mno-amx-*: GCC gives explicit
#   -mno-* flags precedence over what -march implies, so ggml's `__AMX_INT8__` guard is false and
#   the AMX backend is not built. INFERD_LLAMA_AMX=1 keeps AMX (the server's per-quantization
#   self-check still stands in front of it).
# - pip keys its cache of built wheels by the sdist alone, not by CMAKE_ARGS or the CPU: a wheel
#   built natively on one machine would be reused on another CPU. Wheels are kept here under a
#   key of the CPU's model and flags, the compiler, the build flags and the version instead.
set -euo pipefail
venv=${1:?usage: install_llama.sh VENV}
version=0.3.36
flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
if [ "${INFERD_LLAMA_AMX:-0}" = 1 ]; then flags=""; fi
cmake_args="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='${flags}' -DCMAKE_CXX_FLAGS='${flags}' ${INFERD_CMAKE_ARGS:-}"
cpu=$(grep -m1 -E '^(model name|flags)' /proc/cpuinfo 2>/dev/null; grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m)
key=$(printf '%s\n%s\n%s\n%s\n' "$version" "$cmake_args" "$cpu" "$(cc --version 2>/dev/null | head -1)" | sha256sum | cut -c1-16)
house=${INFERD_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/wheels}/$key
if ! ls "$house"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $version for this CPU (key $key; 6-10 minutes once)" >&2
  mkdir -p "$house.tmp"
  CMAKE_ARGS="$cmake_args" "$venv/bin/pip" wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python \
    -w "$house.tmp" "llama-cpp-python==$version"
  rm -rf "$house" && mv "$house.tmp" "$house"
fi
"$venv/bin/pip" install -q "$house"/llama_cpp_python-"$version"-*.whl
