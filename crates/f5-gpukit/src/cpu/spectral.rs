//! Short-time Fourier transforms with a small `n_fft` (ISTFTNet's 20-point transform) as direct
//! DFTs against f64 twiddle tables: at this size a direct transform is cheaper than an FFT plan
//! and exact to f32 rounding. Work is O(n_fft²) per frame, so large transforms (Vocos' 1024)
//! belong to an FFT library instead.

use rayon::prelude::*;

use crate::spec::StftSpec;

/// The periodic Hann window `0.5 − 0.5·cos(2πt/N)` (`torch.hann_window(N)`).
fn hann(n_fft: usize) -> Vec<f64> {
    (0..n_fft).map(|t| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * t as f64 / n_fft as f64).cos()).collect()
}

/// `(cos, sin)` of `2π·k·t/N` for bins `k` and taps `t`, `[bins][n_fft]`, reduced mod N first so
/// the angles stay small and exact.
fn twiddles(n_fft: usize) -> (Vec<f64>, Vec<f64>) {
    let bins = n_fft / 2 + 1;
    let mut cos = vec![0.0; bins * n_fft];
    let mut sin = vec![0.0; bins * n_fft];
    for k in 0..bins {
        for t in 0..n_fft {
            let a = 2.0 * std::f64::consts::PI * ((k * t) % n_fft) as f64 / n_fft as f64;
            cos[k * n_fft + t] = a.cos();
            sin[k * n_fft + t] = a.sin();
        }
    }
    (cos, sin)
}

pub fn stft(spec: &StftSpec, signal: &[f32], mag: &mut [f32], phase: &mut [f32]) {
    let StftSpec { batch, frames, n_fft, hop } = *spec;
    let (bins, samples, half) = (spec.bins(), spec.samples(), n_fft / 2);
    let win = hann(n_fft);
    let (cos, sin) = twiddles(n_fft);
    let total = batch * frames * bins;
    mag[..total].par_chunks_mut(bins).zip(phase[..total].par_chunks_mut(bins)).enumerate().for_each(|(r, (m, p))| {
        let (b, f) = (r / frames, r % frames);
        let x = &signal[b * samples..(b + 1) * samples];
        // The frame reads padded positions f·hop .. f·hop + n_fft of the reflect-padded signal.
        let frame: Vec<f64> = (0..n_fft)
            .map(|t| {
                let i = (f * hop + t) as isize - half as isize;
                let n = samples as isize;
                let s = if i < 0 {
                    -i
                } else if i >= n {
                    2 * (n - 1) - i
                } else {
                    i
                };
                x[s as usize] as f64 * win[t]
            })
            .collect();
        for k in 0..bins {
            let (mut re, mut im) = (0.0f64, 0.0f64);
            for t in 0..n_fft {
                re += frame[t] * cos[k * n_fft + t];
                im -= frame[t] * sin[k * n_fft + t];
            }
            if k == 0 || 2 * k == n_fft {
                // A real signal's DC and Nyquist bins are real: PyTorch's FFT gives +0 exactly,
                // so the phase is exactly 0 or +π, never −π or rounding noise.
                im = 0.0;
            }
            let (re, im) = (re as f32, im as f32);
            m[k] = re.hypot(im);
            p[k] = im.atan2(re);
        }
    });
}

pub fn istft(spec: &StftSpec, mag: &[f32], phase: &[f32], signal: &mut [f32]) {
    let StftSpec { batch, frames, n_fft, hop } = *spec;
    let (bins, samples, half) = (spec.bins(), spec.samples(), n_fft / 2);
    let win = hann(n_fft);
    let (cos, sin) = twiddles(n_fft);
    // Squared-window envelope over the full overlap-added length.
    let full = n_fft + hop * (frames - 1);
    let mut env = vec![0.0f64; full];
    for f in 0..frames {
        for t in 0..n_fft {
            env[f * hop + t] += win[t] * win[t];
        }
    }
    signal[..batch * samples].par_chunks_mut(samples.max(1)).enumerate().for_each(|(b, out)| {
        let mut ola = vec![0.0f64; full];
        for f in 0..frames {
            let base = (b * frames + f) * bins;
            let (re, im): (Vec<f64>, Vec<f64>) = (0..bins)
                .map(|k| {
                    let (m, p) = (mag[base + k] as f64, phase[base + k]);
                    let (s, c) = p.sin_cos();
                    (m * c as f64, m * s as f64)
                })
                .unzip();
            for t in 0..n_fft {
                // irfft: DC and Nyquist once (their imaginary parts ignored), interior bins twice.
                let mut acc = re[0] + re[half] * cos[half * n_fft + t];
                for k in 1..half {
                    acc += 2.0 * (re[k] * cos[k * n_fft + t] - im[k] * sin[k * n_fft + t]);
                }
                ola[f * hop + t] += acc / n_fft as f64 * win[t];
            }
        }
        for (i, o) in out.iter_mut().enumerate() {
            *o = (ola[i + half] / env[i + half]) as f32;
        }
    });
}
