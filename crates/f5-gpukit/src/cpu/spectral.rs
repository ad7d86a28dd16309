//! Short-time Fourier transforms with a small `n_fft` (ISTFTNet's 20-point transform) as direct
//! DFTs against f64 twiddle tables: at this size a direct transform is cheaper than an FFT plan
//! and exact to f32 rounding. Work is O(n_fft²) per frame, so large transforms (Vocos' 1024)
//! belong to an FFT library instead.

use rayon::prelude::*;

use super::simd;
use crate::spec::{PadMode, StftSpec};

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

/// Frames per parallel task of [`stft`] (a fixed split: each frame is computed alone).
const FRAMES_PER_TASK: usize = 1024;
/// Output samples per parallel task of [`istft`]: each task overlap-adds the frames that
/// reach its samples (recomputing the few that straddle two tasks), in frame order, so every
/// sample's sum is the one a single overlap-add pass forms.
const SAMPLES_PER_TASK: usize = 8192;

/// `[batch, frames, bins]` magnitudes and phases of the windowed frames: each frame's DFT in
/// f64 (bins summed over the taps in order; the taps outer, so the bins vectorise), rounded to
/// f32, then put in polar form a task's frames at a time ([`simd::polar_f32`]).
pub fn stft(spec: &StftSpec, signal: &[f32], mag: &mut [f32], phase: &mut [f32]) {
    let StftSpec { batch, frames, n_fft, hop } = *spec;
    let (bins, samples, half) = (spec.bins(), spec.samples(), n_fft / 2);
    let win = hann(n_fft);
    let (cos, sin) = by_tap(&twiddles(n_fft), n_fft);
    let total = batch * frames * bins;
    mag[..total].par_chunks_mut(bins * FRAMES_PER_TASK).zip(phase[..total].par_chunks_mut(bins * FRAMES_PER_TASK)).enumerate().for_each(
        |(blk, (m, p))| {
            let mut frame = vec![0.0f64; n_fft];
            let (mut re, mut im) = (vec![0.0f64; bins], vec![0.0f64; bins]);
            let (mut re32, mut im32) = (vec![0.0f32; m.len()], vec![0.0f32; m.len()]);
            for (j, (r32, i32)) in re32.chunks_exact_mut(bins).zip(im32.chunks_exact_mut(bins)).enumerate() {
                let r = blk * FRAMES_PER_TASK + j;
                let (b, f) = (r / frames, r % frames);
                let x = &signal[b * samples..(b + 1) * samples];
                // The frame reads padded positions f·hop .. f·hop + n_fft of the reflect-padded signal.
                for (t, v) in frame.iter_mut().enumerate() {
                    // Reflect never gives a zero: `Some` always (validated: the pad is below the length).
                    let s = PadMode::Reflect.source(f * hop + t, half, samples).unwrap_or(0);
                    *v = x[s] as f64 * win[t];
                }
                re.fill(0.0);
                im.fill(0.0);
                simd::dft_by_tap(&frame, &cos, &sin, &mut re, &mut im);
                // A real signal's DC and Nyquist bins are real: PyTorch's FFT gives +0 exactly,
                // so the phase is exactly 0 or +π, never −π or rounding noise.
                im[0] = 0.0;
                im[half] = 0.0;
                for k in 0..bins {
                    (r32[k], i32[k]) = (re[k] as f32, im[k] as f32);
                }
            }
            simd::polar_f32(&re32, &im32, m, p);
        },
    );
}

/// `[batch, samples]` from one-sided spectra in polar form: each frame's inverse DFT in f64
/// (the taps inner, so they vectorise; `(sin, cos)` of the phases a task's frames at a time,
/// [`simd::sin_cos_f32`]), windowed, overlap-added in frame order and divided by the summed
/// squared window, in parallel over blocks of output samples.
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
    for b in 0..batch {
        let (mag, phase) = (&mag[b * frames * bins..(b + 1) * frames * bins], &phase[b * frames * bins..(b + 1) * frames * bins]);
        signal[b * samples..(b + 1) * samples].par_chunks_mut(SAMPLES_PER_TASK).enumerate().for_each(|(blk, out)| {
            // Padded positions j0..j1, and the frames f with f·hop ≤ j < f·hop + n_fft for some.
            let j0 = blk * SAMPLES_PER_TASK + half;
            let j1 = j0 + out.len();
            let f_lo = (j0 + 1).saturating_sub(n_fft).div_ceil(hop);
            let f_hi = ((j1 - 1) / hop).min(frames - 1);
            let rows = f_lo * bins..(f_hi + 1) * bins;
            let (mut s32, mut c32) = (vec![0.0f32; rows.len()], vec![0.0f32; rows.len()]);
            simd::sin_cos_f32(&phase[rows.clone()], &mut s32, &mut c32);
            let (mut re, mut im) = (vec![0.0f64; bins], vec![0.0f64; bins]);
            let mut acc = vec![0.0f64; n_fft];
            let mut ola = vec![0.0f64; out.len()];
            for f in f_lo..=f_hi {
                let at = (f - f_lo) * bins;
                for k in 0..bins {
                    let m = mag[f * bins + k] as f64;
                    (re[k], im[k]) = (m * c32[at + k] as f64, m * s32[at + k] as f64);
                }
                // irfft: DC and Nyquist once (their imaginary parts ignored), interior bins twice.
                simd::idft_by_bin(&re, &im, &cos, &sin, &mut acc);
                for (t, &a) in acc.iter().enumerate() {
                    let j = f * hop + t;
                    if (j0..j1).contains(&j) {
                        ola[j - j0] += a / n_fft as f64 * win[t];
                    }
                }
            }
            for ((o, &v), &e) in out.iter_mut().zip(&ola).zip(&env[j0..j1]) {
                *o = (v / e) as f32;
            }
        });
    }
}

/// A `[bins][n_fft]` table pair as `[n_fft][bins]`.
fn by_tap((cos, sin): &(Vec<f64>, Vec<f64>), n_fft: usize) -> (Vec<f64>, Vec<f64>) {
    let bins = cos.len() / n_fft;
    let swap = |v: &Vec<f64>| (0..n_fft * bins).map(|i| v[(i % bins) * n_fft + i / bins]).collect();
    (swap(cos), swap(sin))
}
