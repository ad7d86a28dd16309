"""The reference side of `cargo xtask bench dit|vocos`: the same forward through the official
f5-tts / vocos code on the same full-size random weights and the same shapes, best-of-N, one
JSON object on stdout.
"""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("what", choices=["dit", "vocos"])
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--model", required=True, help="checkpoint (dit) or vocos directory")
ap.add_argument("--frames", type=int, required=True)
ap.add_argument("--text-len", type=int, default=300)
ap.add_argument("--ref-frames", type=int, default=300)
ap.add_argument("--reps", type=int, default=3)
args = ap.parse_args()
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import torch  # noqa: E402

torch.set_num_threads(args.threads)


def best_of(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


out = {"torch": torch.__version__, "threads": args.threads}
# The reference prints progress while loading; stdout must carry only the JSON.
real_stdout = sys.stdout
sys.stdout = sys.stderr
g = torch.Generator().manual_seed(0)
with torch.inference_mode():
    if args.what == "dit":
        from importlib.resources import files

        from f5_tts.infer.utils_infer import load_model
        from f5_tts.model import DiT
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(str(files("f5_tts").joinpath("configs/F5TTS_v1_Base.yaml")))
        t0 = time.perf_counter()
        model = load_model(DiT, OmegaConf.to_container(cfg.model.arch), args.model, mel_spec_type="vocos", vocab_file="", device="cpu")
        out["load_seconds"] = time.perf_counter() - t0
        n = args.frames
        x = torch.randn(1, n, 100, generator=g)
        cond = torch.zeros(1, n, 100)
        cond[:, : args.ref_frames] = torch.randn(1, args.ref_frames, 100, generator=g)
        text = torch.randint(0, 2545, (1, args.text_len), generator=g)
        t = torch.tensor(0.5)
        fwd = lambda: model.transformer(x=x, cond=cond, text=text, time=t, cfg_infer=True, cache=True)  # noqa: E731
        out["forward_seconds"] = best_of(fwd, args.reps)
        model.transformer.clear_cache()
    else:
        from vocos import Vocos

        v = Vocos.from_hparams(os.path.join(args.model, "config.yaml"))
        v.load_state_dict(torch.load(os.path.join(args.model, "pytorch_model.bin"), map_location="cpu", weights_only=True))
        v.eval()
        mel = torch.randn(1, 100, args.frames, generator=g) - 4.0
        out["decode_seconds"] = best_of(lambda: v.decode(mel), args.reps)
json.dump(out, real_stdout)
