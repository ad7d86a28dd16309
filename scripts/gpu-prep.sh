#!/usr/bin/env bash
# Builds, on a machine without a GPU, the release binaries that scripts/gpu-check.sh runs on a
# GPU machine (which has no Rust toolchain), into .gpu/ (git-ignored, carried to the device):
#   .gpu/test-ops        the op-case table (tests/ops.rs), CPU and CUDA instantiations
#   .gpu/test-unit       the crate's unit tests (bf16 GEMM, graph replay, PTX checks)
#   .gpu/gpu_bench       tiny F5 model parity, F5Model (random checkpoint) parity and full-size timing (JSON)
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
cargo build --release -p f5-cli --features cuda --bin f5 --message-format=json-render-diagnostics >> "$log"
rm -rf .gpu && mkdir -p .gpu
python3 - "$log" <<'PY'
import json, shutil, sys
names = {("test", "ops"): "test-ops", ("lib", "f5_gpukit"): "test-unit", ("example", "gpu_bench"): "gpu_bench", ("bin", "f5"): "f5"}
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
du -sh .gpu
ls -l .gpu
