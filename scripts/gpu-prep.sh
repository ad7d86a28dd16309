#!/usr/bin/env bash
# Builds, on a machine without a GPU, the release binaries that scripts/gpu-check.sh runs on a
# GPU machine (which has no Rust toolchain), into .gpu/ (git-ignored), packed as .gpu-carry/gpu.tar.gz
# (carried to the device; gpu-check.sh unpacks it):
#   .gpu/test-ops        the op-case table (tests/ops.rs), CPU and CUDA instantiations
#   .gpu/test-unit       the crate's unit tests (bf16 GEMM, graph replay, PTX checks)
#   .gpu/gpu_bench       tiny F5 model parity, F5Model (random checkpoint) parity and full-size timing (JSON)
#   .gpu/kokoro_gpu      full-size Kokoro (counter weights) parity against the reference's goldens and timing
#   .gpu/kokoro/config.json  Kokoro's config (from ../shared, which does not travel to the device)
#   .gpu/f5              the f5 binary with CUDA, for the end-to-end check (scripts/gpu-e2e.py)
# Kernels are compiled to PTX with the pinned nvcc; a missing nvcc is an error here.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc_line="$(scripts/install-nvcc.sh | grep '^NVCC=')"
eval "$nvcc_line"
export NVCC KIT_REQUIRE_NVCC=1 KIT_PTXAS_VERBOSE=1
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target"
log="$target/gpu-prep-artifacts.json"
cargo test --release -p f5-gpukit --features cuda --no-run --message-format=json-render-diagnostics > "$log"
cargo build --release -p f5-dit --features cuda --example gpu_bench --message-format=json-render-diagnostics >> "$log"
cargo build --release -p f5-kokoro --features cuda --example kokoro_gpu --message-format=json-render-diagnostics >> "$log"
cargo build --release -p f5-cli --features cuda --bin f5 --message-format=json-render-diagnostics >> "$log"
rm -rf .gpu && mkdir -p .gpu
python3 - "$log" <<'PY'
import json, shutil, sys
names = {("test", "ops"): "test-ops", ("lib", "f5_gpukit"): "test-unit", ("example", "gpu_bench"): "gpu_bench", ("example", "kokoro_gpu"): "kokoro_gpu", ("bin", "f5"): "f5"}
found = set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    kind = m["target"]["kind"][0]
    key = (kind, m["target"]["name"])
    if key in names:
        shutil.copy(m["executable"], ".gpu/" + names[key])
        found.add(names[key])
missing = set(names.values()) - found
if missing:
    sys.exit("gpu-prep: not built: " + ", ".join(sorted(missing)))
PY
strip .gpu/* 2>/dev/null || true
shared="${KOKORO_SHARED:-../shared/kokoro}"
mkdir -p .gpu/kokoro && cp "$shared/config.json" .gpu/kokoro/config.json
# What travels to the device is limited in size (the sources and fixtures already take ~36 MB):
# the binaries go as one gzip archive (~18 MB instead of ~41), unpacked by gpu-check.sh.
rm -rf .gpu-carry && mkdir -p .gpu-carry
tar -C .gpu -cf - . | gzip -9 > .gpu-carry/gpu.tar.gz
du -sh .gpu .gpu-carry
ls -l .gpu
