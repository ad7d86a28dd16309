"""The reference side of `cargo xtask bench kokoro`: kokoro 0.9.4's KModel and PyTorch modules on
Kokoro's shapes, best-of-N on the given thread count, one JSON object on stdout.

Inputs come from the Rust side (token ids and style row per case) so both run the same work.
"""
import argparse
import json
import os
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--model", required=True, help="kokoro-v1_0.pth layout checkpoint")
ap.add_argument("--config", required=True)
ap.add_argument("--cases", required=True, help="JSON list of {name, ids, style, speed}")
ap.add_argument("--frames", type=int, required=True, help="predicted frames of the op shapes")
ap.add_argument("--min-seconds", type=float, default=2.0)
args = ap.parse_args()

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)
os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)

import kokoro_stubs  # noqa: E402,F401  (before kokoro: its text pipeline is not needed)

import torch  # noqa: E402
from kokoro.model import KModel  # noqa: E402
from kokoro_ops import time_kokoro_ops  # noqa: E402

torch.set_num_threads(args.threads)


def best_of(fn, min_seconds):
    fn()
    best, spent, reps = float("inf"), 0.0, 0
    while reps < 3 or (spent < min_seconds and reps < 20):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return best


out = {"torch": torch.__version__, "threads": args.threads, "cases": {}}
out["ops"] = time_kokoro_ops(torch, args.frames, args.min_seconds, best_of)
with torch.no_grad():
    model = KModel(repo_id="hexgrad/Kokoro-82M", config=args.config, model=args.model).eval()
    for case in json.loads(args.cases):
        ids = torch.LongTensor([case["ids"]])
        ref_s = torch.tensor([case["style"]], dtype=torch.float32)

        def run():
            torch.manual_seed(0)
            return model.forward_with_tokens(ids, ref_s, case["speed"])

        def first_half():
            # forward_with_tokens up to the decoder's inputs, line for line.
            input_lengths = torch.full((1,), ids.shape[-1], dtype=torch.long)
            text_mask = torch.arange(input_lengths.max()).unsqueeze(0).expand(1, -1).type_as(input_lengths)
            text_mask = torch.gt(text_mask + 1, input_lengths.unsqueeze(1))
            bert_dur = model.bert(ids, attention_mask=(~text_mask).int())
            d_en = model.bert_encoder(bert_dur).transpose(-1, -2)
            s = ref_s[:, 128:]
            d = model.predictor.text_encoder(d_en, s, input_lengths, text_mask)
            x, _ = model.predictor.lstm(d)
            duration = torch.sigmoid(model.predictor.duration_proj(x)).sum(axis=-1) / case["speed"]
            pred_dur = torch.round(duration).clamp(min=1).long().squeeze()
            indices = torch.repeat_interleave(torch.arange(ids.shape[1]), pred_dur)
            aln = torch.zeros((ids.shape[1], indices.shape[0]))
            aln[indices, torch.arange(indices.shape[0])] = 1
            aln = aln.unsqueeze(0)
            en = d.transpose(-1, -2) @ aln
            model.predictor.F0Ntrain(en, s)
            t_en = model.text_encoder(ids, input_lengths, text_mask)
            return t_en @ aln

        audio, _ = run()
        out["cases"][case["name"]] = {
            "seconds": best_of(run, args.min_seconds),
            "samples": int(audio.numel()),
            "first_half": best_of(first_half, args.min_seconds),
        }
print(json.dumps(out))
