"""Regenerates the goldens in this directory from the reference implementation.

    python make.py      # torch (CPU), numpy, vocos==0.1.0; run from anywhere

1. iSTFT goldens from torch.istft (the reference Vocos head with padding="center" calls
   exactly this).

Each case writes three float32 arrays: `istft_n{N}_h{H}_t{T}_re.npy` and `_im.npy`, the
spectrum as [frames, N/2+1] (frame-major, as f5-vocos takes it), and `_out.npy`, the 1-D
waveform torch.istft(center=True, periodic Hann, normalized=False, onesided) returns.

Spectra are built the way the Vocos head builds them: magnitude exp(N(0,1)), clipped at 100,
uniform phase. The DC and Nyquist bins therefore carry non-zero imaginary parts, which the
inverse must ignore.

2. `vocos_tiny_t{T}.npy`: `vocos.decode` of the first T frames of
   `fixtures/goldens/mel_22050.npy` through `fixtures/models/vocos-tiny`, for the shortest
   inputs (T=2, and T=5 < the 7-tap kernels), where convolution padding covers most frames.
"""

import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..", "..")

# (n_fft, hop, frames): the Vocos geometry at its minimum length (T=2) and an odd length,
# small transforms with odd and even frame counts, a non-power-of-two size and a hop that does
# not divide n_fft.
CASES = [
    (1024, 256, 2),
    (1024, 256, 7),
    (16, 4, 9),
    (64, 16, 32),
    (24, 6, 5),
    (32, 12, 6),
]


def main():
    torch.set_num_threads(1)
    torch.manual_seed(2024)
    for n_fft, hop, frames in CASES:
        bins = n_fft // 2 + 1
        logmag = torch.randn(bins, frames)
        phase = (torch.rand(bins, frames) * 2 - 1) * torch.pi
        mag = torch.clip(torch.exp(logmag), max=100.0)
        re = mag * torch.cos(phase)
        im = mag * torch.sin(phase)
        spec = torch.complex(re, im)
        window = torch.hann_window(n_fft)
        out = torch.istft(spec, n_fft=n_fft, hop_length=hop, win_length=n_fft, window=window, center=True)
        assert out.shape == (hop * (frames - 1),), out.shape
        stem = os.path.join(HERE, f"istft_n{n_fft}_h{hop}_t{frames}")
        np.save(stem + "_re.npy", re.T.contiguous().numpy().astype(np.float32))
        np.save(stem + "_im.npy", im.T.contiguous().numpy().astype(np.float32))
        np.save(stem + "_out.npy", out.numpy().astype(np.float32))
        print(stem, out.shape)

    from vocos import Vocos

    tiny = os.path.join(ROOT, "fixtures", "models", "vocos-tiny")
    vocos = Vocos.from_hparams(os.path.join(tiny, "config.yaml"))
    vocos.load_state_dict(torch.load(os.path.join(tiny, "pytorch_model.bin"), weights_only=True))
    vocos.eval()
    mel = torch.from_numpy(np.load(os.path.join(ROOT, "fixtures", "goldens", "mel_22050.npy")))
    for frames in (2, 5):
        with torch.inference_mode():
            wave = vocos.decode(mel[:frames].T[None])[0]
        path = os.path.join(HERE, f"vocos_tiny_t{frames}.npy")
        np.save(path, wave.numpy().astype(np.float32))
        print(path, wave.shape)


if __name__ == "__main__":
    main()
