"""The onnxruntime side of `cargo xtask bench kokoro` and `kokoro-process`: kokoro-onnx's int8
model (`kokoro-v1.0.int8.onnx`, the file f5's int8-derived weights are converted from) run by
onnxruntime directly, with the inputs kokoro-onnx 0.6.1's `Kokoro._infer` builds:

* token ids [1, n + 2] in the graph's integer type, 0 added at both ends;
* style [1, 256] = the voice pack's row n - 1 for n phonemes (`Kokoro._style_for`);
* speed [1] in the graph's speed type.

The session is made as kokoro-onnx makes it (CPU provider, default graph optimisation) except for
the thread count, which both other sides of the bench also fix: intra-op = --threads, inter-op 1.
Calling the session rather than `Kokoro.create` keeps the grapheme-to-phoneme step out of the
timing; the phonemes (or token ids) come from the Rust side, the same as f5's and PyTorch's.

Two modes, one JSON object on stdout each:

* `warm --cases JSON`: cases of {name, ids (already padded), style, speed}; best of N warm runs.
* `process --phonemes P --voice-bin FILE --config FILE --out WAV`: one fresh process that loads
  the model, speaks once and writes a 16-bit wav (the caller measures wall time and peak RSS).
"""
import argparse
import json
import os
import sys
import time
import wave

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["warm", "process"])
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--onnx", required=True, help="kokoro-v1.0.int8.onnx")
ap.add_argument("--cases", help="warm: JSON list of {name, ids, style, speed}")
ap.add_argument("--min-seconds", type=float, default=2.0)
ap.add_argument("--phonemes", help="process: the phoneme string")
ap.add_argument("--voice-bin", help="process: a raw f32 [510, 1, 256] voice pack")
ap.add_argument("--config", help="process: Kokoro's config.json (its vocab maps phonemes to ids)")
ap.add_argument("--speed", type=float, default=1.0)
ap.add_argument("--out", help="process: the wav to write")
args = ap.parse_args()

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)

t0 = time.perf_counter()
import numpy as np  # noqa: E402
import onnxruntime as rt  # noqa: E402

NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(int32)": np.int32, "tensor(int64)": np.int64}


def versions():
    import importlib.metadata as md

    try:
        kokoro_onnx = md.version("kokoro-onnx")
    except md.PackageNotFoundError:
        kokoro_onnx = None
    return {"onnxruntime": rt.__version__, "kokoro_onnx": kokoro_onnx}


def session():
    opts = rt.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    return rt.InferenceSession(args.onnx, sess_options=opts, providers=["CPUExecutionProvider"])


def make_inputs(sess, padded_ids, style, speed):
    dtypes = {i.name: NUMPY_TYPES.get(i.type, np.float32) for i in sess.get_inputs()}
    # Older exports name the token input "tokens", newer ones "input_ids" (kokoro-onnx checks both).
    tokens = "input_ids" if "input_ids" in dtypes else "tokens"
    return {
        tokens: np.array([padded_ids], dtype=dtypes[tokens]),
        "style": np.asarray(style, dtype=dtypes["style"]).reshape(1, -1),
        "speed": np.array([speed], dtype=dtypes["speed"]),
    }


def best_of(fn, min_seconds):
    fn()
    best, spent, reps = float("inf"), 0.0, 0
    while reps < 3 or (spent < min_seconds and reps < 20):
        start = time.perf_counter()
        fn()
        dt = time.perf_counter() - start
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return best


if args.mode == "warm":
    sess = session()
    out = {**versions(), "threads": args.threads, "cases": {}}
    for case in json.loads(args.cases):
        feed = make_inputs(sess, case["ids"], case["style"], case["speed"])
        audio = sess.run(None, feed)[0]
        out["cases"][case["name"]] = {
            "seconds": best_of(lambda: sess.run(None, feed), args.min_seconds),
            "samples": int(np.asarray(audio).size),
        }
    print(json.dumps(out))
    sys.exit(0)

with open(args.config, encoding="utf-8") as f:
    vocab = json.load(f)["vocab"]
ids = [vocab[c] for c in args.phonemes if c in vocab]
pack = np.fromfile(args.voice_bin, dtype=np.float32).reshape(-1, 256)
sess = session()
loaded = time.perf_counter()
audio = np.asarray(sess.run(None, make_inputs(sess, [0, *ids, 0], pack[min(len(ids), len(pack)) - 1], args.speed))[0]).ravel()
spoken = time.perf_counter()
pcm = (np.clip(audio, -1, 1) * 32767).round().astype("<i2").tobytes()
with wave.open(args.out, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(24000)
    w.writeframes(pcm)
print(json.dumps({**versions(), "load_seconds": loaded - t0, "speak_seconds": spoken - loaded,
                  "audio_seconds": audio.size / 24000}))
