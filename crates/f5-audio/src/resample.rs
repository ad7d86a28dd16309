//! Band-limited resampling that reproduces `torchaudio.transforms.Resample(orig, new)` with its
//! defaults (`sinc_interp_hann`, `lowpass_filter_width = 6`, `rolloff = 0.99`).
//!
//! F5-TTS conditions the model on the reference audio after this exact resampler, so a different
//! filter (rubato, a windowed-sinc table) would shift the conditioning mel. The kernel is built
//! with the same dtypes torchaudio uses when the transform is created without a `dtype`:
//! the tap positions in f64, the per-phase offsets `-i / new` in f32 (torch divides an int64
//! `arange` by an int, which yields the default float dtype), everything else in f64, and the
//! finished kernel rounded to f32.

use crate::error::{AudioError, Result};

/// torchaudio's default zero-crossing count of the windowed sinc.
const LOWPASS_FILTER_WIDTH: f64 = 6.0;
/// torchaudio's default cut-off as a fraction of the lower Nyquist frequency.
const ROLLOFF: f64 = 0.99;
/// The highest sample rate accepted anywhere in this crate (1 MHz); above it a header is corrupt.
pub const MAX_SAMPLE_RATE: u32 = 1_000_000;
/// Output size cap so that a corrupt rate pair cannot request an enormous allocation
/// (2^31 samples is a day of 24 kHz audio).
const MAX_OUTPUT_SAMPLES: u64 = 1 << 31;

/// One output phase: the non-zero taps of torchaudio's kernel row and where they start.
///
/// torchaudio clamps the sinc argument to ±6 zero crossings; at the clamp the Hann-squared window
/// is cos²(π/2) ≈ 3.7e-33 and the sinc ≈ 4e-17, so those taps round to exactly 0.0 in f32.
/// Storing only the span around the main lobe is therefore bit-identical to the dense kernel,
/// and keeps rate pairs with a large reduced ratio (e.g. 44 099 → 24 000) cheap.
#[derive(Debug, Clone)]
struct Phase {
    /// Index of the first stored tap in torchaudio's kernel row (`0..2·width+orig`).
    first_tap: usize,
    taps: Vec<f32>,
}

/// A precomputed resampler for one rate pair, like the torchaudio transform object.
#[derive(Debug, Clone)]
pub struct SincResampler {
    from_rate: u32,
    to_rate: u32,
    /// `from_rate / gcd`: input samples consumed per block.
    orig: usize,
    /// `to_rate / gcd`: output samples produced per block.
    new: usize,
    width: usize,
    phases: Vec<Phase>,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}

fn check_rate(rate: u32, what: &str) -> Result<()> {
    if rate == 0 || rate > MAX_SAMPLE_RATE {
        return Err(AudioError::BadSampleRate { what: what.to_string(), rate: u64::from(rate), max: MAX_SAMPLE_RATE });
    }
    Ok(())
}

impl SincResampler {
    /// Builds the kernels for `from_rate → to_rate`. Equal rates give an identity resampler.
    pub fn new(from_rate: u32, to_rate: u32) -> Result<Self> {
        check_rate(from_rate, "resampler input rate")?;
        check_rate(to_rate, "resampler output rate")?;
        let g = gcd(u64::from(from_rate), u64::from(to_rate));
        let orig = (u64::from(from_rate) / g) as usize;
        let new = (u64::from(to_rate) / g) as usize;
        if from_rate == to_rate {
            return Ok(Self { from_rate, to_rate, orig, new, width: 0, phases: Vec::new() });
        }
        // `base_freq = min(orig, new); base_freq *= rolloff` (an int times a Python float).
        let base_freq = (orig.min(new) as f64) * ROLLOFF;
        // `math.ceil(lowpass_filter_width * orig_freq / base_freq)`: int product, float division.
        let width = ((LOWPASS_FILTER_WIDTH * orig as f64) / base_freq).ceil() as usize;
        let row_len = 2 * width + orig;
        let scale = base_freq / orig as f64;
        let mut phases = Vec::with_capacity(new);
        for i in 0..new {
            // `torch.arange(0, -new, -1)[:, None, None] / new`: int64 / int → float32.
            let phase_offset = f64::from(-(i as f32) / new as f32);
            // Taps where |t| < 6 lie in k/orig ∈ (-offset - 6/bf, -offset + 6/bf), k = tap - width.
            let half_span = LOWPASS_FILTER_WIDTH / base_freq * orig as f64;
            let centre = -phase_offset * orig as f64;
            let lo = ((centre - half_span).floor() as i64 - 1).max(-(width as i64));
            let hi = ((centre + half_span).ceil() as i64 + 1).min((width + orig) as i64 - 1);
            let mut taps = Vec::with_capacity((hi - lo + 1).max(0) as usize);
            for k in lo..=hi {
                taps.push(kernel_tap(k, orig, phase_offset, base_freq, scale));
            }
            // `lo >= -width` by construction, so the offset is non-negative.
            let first_tap = (lo + width as i64) as usize;
            phases.push(Phase { first_tap, taps });
        }
        debug_assert!(phases.iter().all(|p| p.first_tap + p.taps.len() <= row_len));
        Ok(Self { from_rate, to_rate, orig, new, width, phases })
    }

    /// The input rate this kernel was built for.
    pub fn from_rate(&self) -> u32 {
        self.from_rate
    }

    /// The output rate.
    pub fn to_rate(&self) -> u32 {
        self.to_rate
    }

    /// Output length torchaudio produces for `len` input samples:
    /// `ceil(torch.as_tensor(new * len / orig))`. The quotient is a Python float, and
    /// `torch.as_tensor` of a Python float is float32, so it is rounded to f32 before the ceil.
    pub fn output_len(&self, len: usize) -> u64 {
        if self.from_rate == self.to_rate {
            return len as u64;
        }
        let quotient = (self.new as f64 * len as f64) / self.orig as f64;
        (quotient as f32).ceil() as u64
    }

    /// Resamples one channel.
    pub fn process(&self, input: &[f32]) -> Result<Vec<f32>> {
        if self.from_rate == self.to_rate {
            return Ok(input.to_vec());
        }
        let len = input.len();
        let target = self.output_len(len);
        if target > MAX_OUTPUT_SAMPLES {
            return Err(AudioError::ResampleTooLarge {
                from: self.from_rate,
                to: self.to_rate,
                len,
                out: target,
                limit: MAX_OUTPUT_SAMPLES,
            });
        }
        // conv1d over the input padded with (width, width + orig) zeros, stride orig:
        // floor(len / orig) + 1 blocks of `new` outputs, interleaved phase-fastest.
        let blocks = len / self.orig + 1;
        let produced = (blocks * self.new) as u64;
        let out_len = target.min(produced) as usize;
        let mut out = Vec::with_capacity(out_len);
        'blocks: for block in 0..blocks {
            let block_start = block * self.orig;
            for phase in &self.phases {
                if out.len() == out_len {
                    break 'blocks;
                }
                // Padded index p = block_start + tap maps to input index p - width.
                let mut acc = 0.0f64;
                let first = (block_start + phase.first_tap) as i64 - self.width as i64;
                for (j, &w) in phase.taps.iter().enumerate() {
                    let idx = first + j as i64;
                    if idx >= 0 {
                        if let Some(&x) = input.get(idx as usize) {
                            acc += f64::from(w) * f64::from(x);
                        }
                    }
                }
                out.push(acc as f32);
            }
        }
        Ok(out)
    }
}

/// One kernel value exactly as torchaudio computes it, rounded to f32 at the end.
fn kernel_tap(k: i64, orig: usize, phase_offset: f64, base_freq: f64, scale: f64) -> f32 {
    // `idx = torch.arange(-width, width + orig, dtype=float64) / orig`
    let idx = k as f64 / orig as f64;
    let mut t = (phase_offset + idx) * base_freq;
    t = t.clamp(-LOWPASS_FILTER_WIDTH, LOWPASS_FILTER_WIDTH);
    // `torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2`, evaluated left to right.
    let c = (t * std::f64::consts::PI / LOWPASS_FILTER_WIDTH / 2.0).cos();
    let window = c * c;
    let t = t * std::f64::consts::PI;
    let sinc = if t == 0.0 { 1.0 } else { t.sin() / t };
    // `kernels *= window * scale`
    (sinc * (window * scale)) as f32
}

/// Resamples `input` from `from_rate` to `to_rate` like `torchaudio.functional.resample` with the
/// default filter; equal rates return a copy. Build a [`SincResampler`] to reuse the kernels.
pub fn resample(input: &[f32], from_rate: u32, to_rate: u32) -> Result<Vec<f32>> {
    SincResampler::new(from_rate, to_rate)?.process(input)
}

/// Resamples to F5-TTS's 24 kHz model rate.
pub fn resample_to_24k(input: &[f32], from_rate: u32) -> Result<Vec<f32>> {
    resample(input, from_rate, crate::TARGET_SAMPLE_RATE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dense kernel row as torchaudio builds it (every tap, clamped ones included).
    fn dense_row(rs: &SincResampler, i: usize) -> Vec<f32> {
        let base_freq = (rs.orig.min(rs.new) as f64) * ROLLOFF;
        let scale = base_freq / rs.orig as f64;
        let phase_offset = f64::from(-(i as f32) / rs.new as f32);
        (-(rs.width as i64)..(rs.width + rs.orig) as i64).map(|k| kernel_tap(k, rs.orig, phase_offset, base_freq, scale)).collect()
    }

    #[test]
    fn sparse_phases_equal_dense_kernel() {
        for (from, to) in [(44100, 24000), (16000, 24000), (48000, 24000), (22050, 24000), (11025, 24000), (8000, 24000)] {
            let rs = SincResampler::new(from, to).unwrap();
            for (i, phase) in rs.phases.iter().enumerate() {
                let dense = dense_row(&rs, i);
                for (k, &v) in dense.iter().enumerate() {
                    let sparse =
                        if k >= phase.first_tap && k < phase.first_tap + phase.taps.len() { phase.taps[k - phase.first_tap] } else { 0.0 };
                    // Clamped taps may be -0.0 in the dense row; a signed zero adds nothing to the sum.
                    assert!(v == sparse && (v != 0.0 || v.to_bits() & 0x7fff_ffff == 0), "{from}->{to} phase {i} tap {k}: {v} vs {sparse}");
                }
            }
        }
    }

    #[test]
    fn widths_and_ratios_match_torchaudio() {
        // torchaudio: orig = 44100/300, new = 24000/300, width = ceil(6·147 / (80·0.99)) = 12, etc.
        let rs = SincResampler::new(44100, 24000).unwrap();
        assert_eq!((rs.orig, rs.new, rs.width), (147, 80, 12));
        let rs = SincResampler::new(16000, 24000).unwrap();
        assert_eq!((rs.orig, rs.new, rs.width), (2, 3, 7));
        let rs = SincResampler::new(48000, 24000).unwrap();
        assert_eq!((rs.orig, rs.new, rs.width), (2, 1, 13));
    }
}
