"""The reference side of `cargo xtask bench kokoro-process`: one fresh process that loads kokoro
0.9.4's KModel and a voice pack from a release-layout folder, speaks one phoneme string (as
KPipeline.infer does: the voice row for its length, `KModel.__call__`), writes a 16-bit wav and
prints one JSON object. The process's wall time and peak RSS are measured by the caller.
"""
import argparse
import json
import os
import time
import wave

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--model-dir", required=True, help="config.json, kokoro-v1_0.pth, voices/NAME.pt")
ap.add_argument("--voice", required=True)
ap.add_argument("--phonemes", required=True)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--out", required=True)
args = ap.parse_args()

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import kokoro_stubs  # noqa: E402,F401  (before kokoro: its text pipeline is not needed)

t0 = time.perf_counter()
import torch  # noqa: E402
from kokoro.model import KModel  # noqa: E402

torch.set_num_threads(args.threads)
d = args.model_dir
model = KModel(repo_id="hexgrad/Kokoro-82M", config=os.path.join(d, "config.json"), model=os.path.join(d, "kokoro-v1_0.pth")).eval()
pack = torch.load(os.path.join(d, "voices", f"{args.voice}.pt"), map_location="cpu", weights_only=True)
loaded = time.perf_counter()
torch.manual_seed(args.seed)
with torch.no_grad():
    audio = model(args.phonemes, pack[len(args.phonemes) - 1], 1.0)
spoken = time.perf_counter()
pcm = (audio.clamp(-1, 1) * 32767).round().to(torch.int16).numpy().tobytes()
with wave.open(args.out, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(24000)
    w.writeframes(pcm)
print(json.dumps({"torch": torch.__version__, "load_seconds": loaded - t0, "speak_seconds": spoken - loaded,
                  "audio_seconds": audio.shape[-1] / 24000}))
