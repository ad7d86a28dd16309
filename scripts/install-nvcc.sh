#!/usr/bin/env bash
# Installs the pinned CUDA 13.0 compiler (nvcc, ptxas, headers) from pip wheels into an ignored
# directory and prints `NVCC=<path>`. Idempotent: a working install is reused.
#
# Pinned to 13.0 on purpose: newer nvcc emits a PTX ISA that a CUDA 13.0 driver rejects.
# WITH_NVRTC=1 also installs libnvrtc (for exercising the run-time compile path).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${CUDA_PIP_DIR:-$PWD/target/cuda-13.0}"
nvcc="$dir/nvidia/cu13/bin/nvcc"
want_nvrtc="${WITH_NVRTC:-}"
have_nvrtc() { [ -e "$dir/nvidia/cu13/lib/libnvrtc.so.13" ]; }
if ! "$nvcc" --version >/dev/null 2>&1 || { [ -n "$want_nvrtc" ] && ! have_nvrtc; }; then
  # pip --target silently skips packages into a directory that already holds `nvidia/`:
  # install everything in one call into a fresh directory.
  rm -rf "$dir"
  # A private venv's pip: the system Python may be externally managed or have no pip at all.
  venv="$dir-pip"
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --no-deps --no-compile --disable-pip-version-check --target "$dir" \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 ${want_nvrtc:+nvidia-cuda-nvrtc==13.0.88} >&2
fi
"$nvcc" --version >/dev/null
echo "NVCC=$nvcc"
