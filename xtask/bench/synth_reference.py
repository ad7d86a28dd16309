"""The reference side of `cargo xtask bench synth`: one whole synthesis through the official
f5-tts code path a user runs (load_vocoder, load_model, preprocess_ref_audio_text,
infer_process, write a wav), in a fresh process, so that the parent can time it from process
start like ours. One JSON object on stdout: stage timings and this process's peak RSS.
"""
import argparse
import json
import os
import resource
import sys
import time

STARTED = time.perf_counter()
ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--model", required=True, help="F5TTS_v1_Base checkpoint")
ap.add_argument("--vocoder", required=True, help="directory with config.yaml and pytorch_model.bin")
ap.add_argument("--ref", required=True)
ap.add_argument("--ref-text", required=True)
ap.add_argument("--text", required=True)
ap.add_argument("--nfe", type=int, required=True)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--out", required=True)
args = ap.parse_args()
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)

# The reference prints progress while it works; stdout must carry only the JSON.
real_stdout = sys.stdout
sys.stdout = sys.stderr

import soundfile as sf  # noqa: E402
import torch  # noqa: E402
from importlib.resources import files  # noqa: E402

from f5_tts.infer import utils_infer  # noqa: E402
from f5_tts.model import DiT  # noqa: E402
from f5_tts.model.utils import seed_everything  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

torch.set_num_threads(args.threads)
out = {"torch": torch.__version__, "threads": args.threads, "imports_seconds": time.perf_counter() - STARTED}

t0 = time.perf_counter()
vocoder = utils_infer.load_vocoder("vocos", is_local=True, local_path=args.vocoder, device="cpu")
cfg = OmegaConf.load(str(files("f5_tts").joinpath("configs/F5TTS_v1_Base.yaml")))
model = utils_infer.load_model(DiT, OmegaConf.to_container(cfg.model.arch), args.model, mel_spec_type="vocos", vocab_file="", device="cpu")
out["load_seconds"] = time.perf_counter() - t0

t0 = time.perf_counter()
seed_everything(args.seed)
ref_audio, ref_text = utils_infer.preprocess_ref_audio_text(args.ref, args.ref_text, show_info=lambda *a, **k: None)
wave, sr, _ = utils_infer.infer_process(
    ref_audio, ref_text, args.text, model, vocoder, mel_spec_type="vocos", show_info=lambda *a, **k: None,
    progress=None, nfe_step=args.nfe, device="cpu",
)
out["synth_seconds"] = time.perf_counter() - t0
sf.write(args.out, wave, sr, subtype="PCM_16")
out["audio_seconds"] = len(wave) / sr
# ru_maxrss is in KiB on Linux.
out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
json.dump(out, real_stdout)
