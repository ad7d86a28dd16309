#!/usr/bin/env bash
# Runs on a GPU machine (no Rust toolchain needed), from the repository root, with the .gpu/
# directory built by scripts/gpu-prep.sh copied next to the sources (or its archive .gpu-carry/gpu.tar.gz):
# `bash scripts/gpu-check.sh`.
# Everything goes to $OUT: summary.json (one entry per step, with gpu_bench's, kokoro_gpu's and the
# end-to-end reports inside) and logs.tar.gz (env.txt, one log per step, the reports). Budget: 9.5 minutes worst case (every step at its timeout, 565 s);
# expected 1–3 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
if [ ! -x .gpu/f5 ] && [ -f .gpu-carry/gpu.tar.gz ]; then
  mkdir -p .gpu && gzip -dc .gpu-carry/gpu.tar.gz | tar -C .gpu -xf - || { echo "cannot unpack .gpu-carry/gpu.tar.gz" >&2; exit 2; }
fi
mkdir -p "$OUT"
steps_json="$OUT/steps.jsonl"
: > "$steps_json"

step() {  # step NAME TIMEOUT_S CMD...   (a failure fails the check)
  run_step true "$@"
}
info_step() {  # the same, but only reported (tools that may not work on every machine)
  run_step false "$@"
}
run_step() {
  local required=$1 name=$2 limit=$3 t0=$SECONDS rc
  shift 3
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  printf '{"step":"%s","rc":%d,"seconds":%d,"required":%s}\n' "$name" "$rc" "$((SECONDS - t0))" "$required" >> "$steps_json"
  echo "== $name rc=$rc $((SECONDS - t0))s"
  grep -E "^test result|FAILED|panicked|SKIP" "$OUT/$name.log" | head -20
}

# cudarc opens libcuda.so.1, libcublas.so.13 and (fallback only) libnvrtc.so.13 at run time.
libdirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
  [ -d "$d" ] && libdirs="$libdirs:$d"
done
for d in $(python3 - 2>/dev/null <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
seen = set()
for r in roots:
    for lib in glob.glob(os.path.join(r, "nvidia", "**", "lib*.so*"), recursive=True):
        if any(k in os.path.basename(lib) for k in ("cublas", "nvrtc")):
            seen.add(os.path.dirname(lib))
print("\n".join(sorted(seen)))
PY
); do libdirs="$libdirs:$d"; done
export LD_LIBRARY_PATH="${libdirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KIT_REQUIRE_GPU=1 RUST_BACKTRACE=1

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  command -v nvcc >/dev/null && nvcc --version | tail -1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldconfig -p | grep -E 'libcuda\.so\.1|libcublas|libnvrtc' || true
} > "$OUT/env.txt" 2>&1

# 1. Every op against the f64 reference table, on the build-time PTX (CPU suites run too).
step parity 75 .gpu/test-ops --test-threads=4
# 2. bf16 weight GEMM, graph replay, open errors (the NVRTC compile test is step 3's job), and
#    graph-capture safety: a graph captured with a small bf16 GEMM, then a larger eager bf16 GEMM
#    that grows the scratch, then the replay (must equal the eager result); captures that must be
#    refused (scratch growth, LSTM lengths, embedding ids); GRN replayed from a graph.
step unit 40 .gpu/test-unit --test-threads=4 --skip nvrtc_compiles_every_module
# 3. The CUDA suite again with kernels compiled by NVRTC at start-up (the no-nvcc build path).
step nvrtc 60 env KIT_FORCE_NVRTC=1 .gpu/test-ops cuda:: --test-threads=4
# 4. Out-of-bounds and race checks on the CUDA suite where the sanitizer works.
if command -v compute-sanitizer >/dev/null 2>&1; then
  info_step memcheck 40 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/test-ops cuda:: --test-threads=1
  # A replay reading scratch that an eager GEMM freed would be a use-after-free here.
  info_step memcheck-graph 30 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/test-unit graph_keeps_its_bf16_scratch --test-threads=1
fi
# 5. Tiny F5 model CPU vs CUDA; the real F5Model from a random checkpoint: small CPU vs CUDA
#    parity, then full-size (v1 Base) timing, eager and graph.
step bench 140 .gpu/gpu_bench --json "$OUT/bench.json"
# 6. Kokoro at full size (counter weights): every stage against kokoro 0.9.4's goldens on CUDA,
#    then phonemes → audio timed on CUDA (f32, bf16 weights) and on the CPU backend.
step kokoro 120 .gpu/kokoro_gpu --config .gpu/kokoro/config.json --json "$OUT/kokoro.json"
# 7. The whole pipeline through the f5 binary: synth on CPU vs CUDA (f32, bf16), then the daemon
#    with --device cuda answering POST /tts (writes $OUT/e2e/e2e.json).
step e2e 60 python3 scripts/gpu-e2e.py .gpu/f5 "$OUT/e2e" --device cuda

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
steps = [json.loads(l) for l in open(os.path.join(out, "steps.jsonl")) if l.strip()]
bench = None
try:
    bench = json.load(open(os.path.join(out, "bench.json")))
except Exception as e:
    bench = {"error": str(e)}
kokoro = None
try:
    kokoro = json.load(open(os.path.join(out, "kokoro.json")))
except Exception as e:
    kokoro = {"error": str(e)}
e2e = None
try:
    e2e = json.load(open(os.path.join(out, "e2e", "e2e.json")))
except Exception as e:
    e2e = {"error": str(e)}
doc = {"ok": all(s["rc"] == 0 for s in steps if s["required"]), "steps": steps, "bench": bench, "kokoro": kokoro, "e2e": e2e}
json.dump(doc, open(os.path.join(out, "summary.json"), "w"), indent=2)
print(json.dumps({"ok": doc["ok"], "steps": steps}))
PY
rm -f "$steps_json"
# The device hands back at most 8 files from $OUT: keep summary.json (every step's result and the
# JSON reports) and pack the logs and reports into one archive; the e2e waves (.npy) stay behind.
(
  cd "$OUT" || exit 0
  pack="$(mktemp)"
  tar czf "$pack" --exclude='*.npy' --exclude=summary.json . 2>/dev/null &&
    find . -mindepth 1 -maxdepth 1 ! -name summary.json -exec rm -rf {} + &&
    mv "$pack" logs.tar.gz
)
