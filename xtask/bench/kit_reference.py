"""The reference side of `cargo xtask bench kit`: the same GEMM and attention shapes through
numpy (OpenBLAS) and PyTorch (MKL/oneDNN), and Kokoro's ops on its shapes through PyTorch
(`kokoro_ops.py`), best-of-N, printed as one JSON object on stdout.

Thread counts are fixed before the libraries load, so every library runs on the same number of
cores as the Rust side.
"""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--shapes", required=True, help="JSON list of [m, k, n]")
ap.add_argument("--attention", required=True, help="JSON list of [batch_heads, n, head_dim]")
ap.add_argument("--min-seconds", type=float, default=0.8)
ap.add_argument("--kokoro-frames", type=int, default=0, help="also time Kokoro's ops for this many predicted frames")
args = ap.parse_args()

t = str(args.threads)
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = t
# Settings for old OpenBLAS builds that slow a current one down; see the project's benchmark notes.
os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)

import numpy as np  # noqa: E402


def best_of(fn, min_seconds):
    fn()
    best = float("inf")
    spent = 0.0
    reps = 0
    while reps < 3 or (spent < min_seconds and reps < 50):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        spent += dt
        reps += 1
    return best


out = {"numpy": {}, "torch": {}, "torch_sdpa": {}, "versions": {"numpy": np.__version__, "python": sys.version.split()[0]}}
shapes = json.loads(args.shapes)
rng = np.random.default_rng(0)
for m, k, n in shapes:
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    c = np.empty((m, n), dtype=np.float32)
    s = best_of(lambda: np.matmul(a, w.T, out=c), args.min_seconds)
    out["numpy"][f"{m}x{k}x{n}"] = 2 * m * k * n / s / 1e9

try:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    out["versions"]["torch"] = torch.__version__
    with torch.inference_mode():
        for m, k, n in shapes:
            a = torch.randn(m, k)
            w = torch.randn(n, k)
            b = torch.randn(n)
            s = best_of(lambda: F.linear(a, w, b), args.min_seconds)
            out["torch"][f"{m}x{k}x{n}"] = 2 * m * k * n / s / 1e9
        for bh, n, d in json.loads(args.attention):
            q, k_, v = (torch.randn(1, bh, n, d) for _ in range(3))
            s = best_of(lambda: F.scaled_dot_product_attention(q, k_, v), args.min_seconds)
            out["torch_sdpa"][f"{bh}x{n}x{d}"] = {"seconds": s, "gflops": 4 * bh * n * n * d / s / 1e9}
    if args.kokoro_frames:
        from kokoro_ops import time_kokoro_ops

        out["kokoro_ops"] = time_kokoro_ops(torch, args.kokoro_frames, args.min_seconds, best_of)
except ImportError:
    out["versions"]["torch"] = None

json.dump(out, sys.stdout)
