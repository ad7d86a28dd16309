//! The Vocos log-mel spectrogram F5-TTS conditions on (`get_vocos_mel_spectrogram`):
//! `torchaudio.transforms.MelSpectrogram(24000, n_fft=1024, win_length=1024, hop_length=256,
//! n_mels=100, power=1, center=True, norm=None)` followed by `clamp(min=1e-5).log()`.
//!
//! The filterbank and window are built in f32 with torch's formulas so the constants agree to the
//! last bit where possible; the FFT and the mel projection run in f64 and are rounded to f32,
//! which sits within torch's own float32 rounding noise.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

use crate::error::{AudioError, Result};

/// FFT size of the Vocos mel (what F5-TTS was trained on).
pub const N_FFT: usize = 1024;
/// Samples between mel frames: one frame per 256 samples at 24 kHz.
pub const HOP_LENGTH: usize = 256;
/// Hann window length (the whole FFT).
pub const WIN_LENGTH: usize = 1024;
/// Mel bands.
pub const N_MELS: usize = 100;
/// One-sided FFT bins.
pub const N_FREQS: usize = N_FFT / 2 + 1;
/// `center=True` pads `n_fft / 2` samples on each side.
pub const CENTER_PAD: usize = N_FFT / 2;
/// Floor applied before the natural log (`mel.clamp(min=1e-5).log()`).
pub const LOG_FLOOR: f32 = 1e-5;
const MEL_SAMPLE_RATE: u32 = 24_000;

/// `torch.linspace(start, end, steps)` for float32 on CPU: the step is computed in f32, the first
/// half counts up from `start` and the second half down from `end`, each with a fused
/// multiply-add (one rounding), which is what torch's compiled kernel does: measured bit-exact
/// against torch 2.15 for the 102 mel points.
pub fn torch_linspace_f32(start: f32, end: f32, steps: usize) -> Vec<f32> {
    if steps == 0 {
        return Vec::new();
    }
    if steps == 1 {
        return vec![start];
    }
    let step = (end - start) / (steps - 1) as f32;
    let halfway = steps / 2;
    (0..steps).map(|i| if i < halfway { step.mul_add(i as f32, start) } else { (-step).mul_add((steps - i - 1) as f32, end) }).collect()
}

/// The 102 filter edge frequencies (Hz) torch computes for F5's mel (`_mel_to_hz` of the f32
/// linspace over 0..mel(12000)), as f32 bit patterns. torch evaluates `10 ** x` with its own
/// vectorised float32 power, which differs from the platform `powf` by an ulp at a few points;
/// storing torch's values makes the filterbank bit-identical. Recomputed by
/// [`mel_points_hz`], which the tests compare against this table.
const F5_MEL_POINTS_HZ_BITS: [u32; N_MELS + 2] = [
    0x00000000, 0x41a30641, 0x422565b6, 0x427bb971, 0x42aa484e, 0x42d7fee0, 0x43038516, 0x431bba09, 0x4334a35e, 0x434e465b, 0x4368a86a,
    0x4381e78b, 0x438fe00d, 0x439e40ae, 0x43ad0c74, 0x43bc467f, 0x43cbf207, 0x43dc1253, 0x43ecaad1, 0x43fdbef7, 0x4407a935, 0x4410b46d,
    0x441a0309, 0x44239702, 0x442d725e, 0x4437972f, 0x44420799, 0x444cc5ce, 0x4457d413, 0x446334bd, 0x446eea33, 0x447af6eb, 0x4483aeb9,
    0x448a102f, 0x4490a136, 0x4497632b, 0x449e577c, 0x44a57fa1, 0x44acdd1c, 0x44b4717d, 0x44bc3e58, 0x44c44555, 0x44cc8828, 0x44d50887,
    0x44ddc843, 0x44e6c935, 0x44f00d3f, 0x44f99658, 0x4501b340, 0x4506bfe6, 0x450bf22c, 0x45114b2d, 0x4516cc0a, 0x451c75e8, 0x452249fb,
    0x45284981, 0x452e75b7, 0x4534cff1, 0x453b597e, 0x454213c6, 0x45490032, 0x45502036, 0x45577551, 0x455f0116, 0x4566c517, 0x456ec2f4,
    0x4576fc64, 0x457f731d, 0x45841473, 0x45888fcf, 0x458d2c92, 0x4591ebb1, 0x4596ce34, 0x459bd51c, 0x45a1017a, 0x45a65469, 0x45abcf04,
    0x45b17274, 0x45b73fe7, 0x45bd389d, 0x45c35dd1, 0x45c9b0cd, 0x45d032f2, 0x45d6e597, 0x45ddca23, 0x45e4e20c, 0x45ec2ed8, 0x45f3b207,
    0x45fb6d36, 0x4601b0ff, 0x4605c909, 0x4609ff98, 0x460e558d, 0x4612cbd0, 0x46176352, 0x461c1d11, 0x4620fa07, 0x4625fb39, 0x462b21b5,
    0x46306e98, 0x4635e2f8, 0x463b8001,
];

/// `torch.hann_window(n, periodic=True)` in float32: torch evaluates the Hann window over `n + 1`
/// points and drops the last, i.e. `0.5 - 0.5·cos(2πk/n)`. A symmetric window (÷(n−1)) would
/// shift every magnitude slightly.
pub fn hann_window_periodic(n: usize) -> Vec<f32> {
    // torch: float32 `arange(n) * (2π / n)`, then cos, `* -0.5 + 0.5`. The cosine is evaluated in
    // f64 and rounded; torch's vectorised f32 cosine differs by one ulp at a few points.
    let factor = (std::f64::consts::PI * 2.0 / n as f64) as f32;
    (0..n)
        .map(|k| {
            let c = f64::from((k as f32) * factor).cos() as f32;
            c * -0.5 + 0.5
        })
        .collect()
}

fn hz_to_mel_htk(freq: f64) -> f64 {
    2595.0 * (1.0 + freq / 700.0).log10()
}

/// `torchaudio.functional.melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate,
/// norm=None, mel_scale="htk")`, row-major `[n_freqs, n_mels]`.
///
/// dtypes follow torchaudio: the mel end points are Python floats (f64), then `torch.linspace`
/// (f32), `_mel_to_hz` and the triangle slopes in f32.
pub fn melscale_fbanks_htk(n_freqs: usize, f_min: f64, f_max: f64, n_mels: usize, sample_rate: u32) -> Vec<f32> {
    let f_pts = mel_points_hz(f_min, f_max, n_mels);
    triangular_filterbank(n_freqs, sample_rate, &f_pts)
}

/// `_mel_to_hz(torch.linspace(mel(f_min), mel(f_max), n_mels + 2))` in f32 (HTK scale).
pub fn mel_points_hz(f_min: f64, f_max: f64, n_mels: usize) -> Vec<f32> {
    let m_min = hz_to_mel_htk(f_min) as f32;
    let m_max = hz_to_mel_htk(f_max) as f32;
    let m_pts = torch_linspace_f32(m_min, m_max, n_mels + 2);
    m_pts.iter().map(|&m| 700.0 * (10f32.powf(m / 2595.0) - 1.0)).collect()
}

/// F5's filterbank (`melscale_fbanks(513, 0, 12000, 100, 24000)`), built from torch's edge
/// frequencies so that it matches bit for bit.
pub fn f5_filterbank() -> Vec<f32> {
    let f_pts: Vec<f32> = F5_MEL_POINTS_HZ_BITS.iter().map(|&b| f32::from_bits(b)).collect();
    triangular_filterbank(N_FREQS, MEL_SAMPLE_RATE, &f_pts)
}

/// `_create_triangular_filterbank(linspace(0, sample_rate // 2, n_freqs), f_pts)` in f32.
fn triangular_filterbank(n_freqs: usize, sample_rate: u32, f_pts: &[f32]) -> Vec<f32> {
    let n_mels = f_pts.len().saturating_sub(2);
    let all_freqs = torch_linspace_f32(0.0, (sample_rate / 2) as f32, n_freqs);
    let f_diff: Vec<f32> = f_pts.windows(2).map(|w| w[1] - w[0]).collect();
    let mut fb = vec![0.0f32; n_freqs * n_mels];
    for (k, &freq) in all_freqs.iter().enumerate() {
        for j in 0..n_mels {
            // `-1.0 * x` is an exact negation.
            let down = -(f_pts[j] - freq) / f_diff[j];
            let up = (f_pts[j + 2] - freq) / f_diff[j + 1];
            fb[k * n_mels + j] = down.min(up).max(0.0);
        }
    }
    fb
}

/// A log-mel frontend with its window, filterbank and FFT plan prepared once.
pub struct MelSpectrogram {
    window: Vec<f32>,
    /// `[N_FREQS, N_MELS]` row-major.
    filterbank: Vec<f32>,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl Default for MelSpectrogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MelSpectrogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MelSpectrogram").field("n_fft", &N_FFT).field("n_mels", &N_MELS).finish()
    }
}

/// Number of mel frames for `len` samples at hop 256 with centre padding.
pub fn mel_frame_count(len: usize) -> usize {
    1 + len / HOP_LENGTH
}

impl MelSpectrogram {
    /// Plans the FFT and builds the window and filterbank once; reuse it for every clip.
    pub fn new() -> Self {
        let mut planner = RealFftPlanner::<f64>::new();
        Self { window: hann_window_periodic(WIN_LENGTH), filterbank: f5_filterbank(), fft: planner.plan_fft_forward(N_FFT) }
    }

    /// The mel filterbank `[N_FREQS, N_MELS]`, as torchaudio builds it (for comparisons).
    pub fn filterbank(&self) -> &[f32] {
        &self.filterbank
    }

    /// The periodic Hann window.
    pub fn window(&self) -> &[f32] {
        &self.window
    }

    /// Magnitude mel spectrogram (before the log), row-major `[frames, 100]`.
    pub fn mel_magnitude(&self, wave: &[f32]) -> Result<Vec<f32>> {
        let padded = reflect_pad(wave, CENTER_PAD)?;
        let frames = mel_frame_count(wave.len());
        let mut input = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        let mut magnitude = vec![0.0f64; N_FREQS];
        let mut out = vec![0.0f32; frames * N_MELS];
        for (f, row) in out.chunks_exact_mut(N_MELS).enumerate() {
            let start = f * HOP_LENGTH;
            let frame = padded.get(start..start + N_FFT).ok_or(AudioError::TooShortForMel {
                len: wave.len(),
                pad: CENTER_PAD,
                min: CENTER_PAD + 1,
            })?;
            // torch multiplies frame and window in float32 before the transform.
            for ((dst, &x), &w) in input.iter_mut().zip(frame).zip(&self.window) {
                *dst = f64::from(x * w);
            }
            self.fft.process_with_scratch(&mut input, &mut spectrum, &mut scratch).map_err(|e| AudioError::Fft(e.to_string()))?;
            for (m, c) in magnitude.iter_mut().zip(&spectrum) {
                *m = c.re.hypot(c.im);
            }
            for (j, dst) in row.iter_mut().enumerate() {
                let mut acc = 0.0f64;
                for (k, &m) in magnitude.iter().enumerate() {
                    acc += m * f64::from(self.filterbank[k * N_MELS + j]);
                }
                *dst = acc as f32;
            }
        }
        Ok(out)
    }

    /// F5's conditioning mel: `ln(max(mel, 1e-5))`, row-major `[frames, 100]` with
    /// `frames = 1 + len / 256`. The input must be 24 kHz mono.
    pub fn log_mel(&self, wave: &[f32]) -> Result<Vec<f32>> {
        let mut mel = self.mel_magnitude(wave)?;
        for v in &mut mel {
            *v = v.max(LOG_FLOOR).ln();
        }
        Ok(mel)
    }
}

/// `torch.nn.functional.pad(x, (pad, pad), mode="reflect")`: mirrors without repeating the edge
/// sample. torch rejects `pad >= len`, and so do we, with an error instead of an exception.
pub fn reflect_pad(wave: &[f32], pad: usize) -> Result<Vec<f32>> {
    let len = wave.len();
    if pad >= len {
        return Err(AudioError::TooShortForMel { len, pad, min: pad + 1 });
    }
    let mut out = Vec::with_capacity(len + 2 * pad);
    out.extend((1..=pad).rev().map(|i| wave[i]));
    out.extend_from_slice(wave);
    out.extend((0..pad).map(|i| wave[len - 2 - i]));
    Ok(out)
}

/// One-shot convenience for [`MelSpectrogram::log_mel`].
pub fn log_mel_spectrogram(wave: &[f32]) -> Result<Vec<f32>> {
    MelSpectrogram::new().log_mel(wave)
}
