//! `torch.istft(center=True, window=hann_window(n_fft), normalized=False, onesided=True)` on
//! the host.
//!
//! Each of the four steps below is a place where a hand-written inverse goes subtly wrong
//! while still sounding like audio, which is why each is spelled out:
//! 1. the one-sided spectrum is a Hermitian half: bins 1..n_fft/2−1 stand for two bins, DC and
//!    Nyquist for one, and DC/Nyquist are real — their imaginary parts are dropped, not used;
//! 2. `irfft` uses the "backward" norm: a factor 1/n_fft on the inverse;
//! 3. every frame is multiplied by the periodic Hann window, overlap-added at the hop, and the
//!    sum divided by the overlap-added *squared* window. That envelope is a constant only in the
//!    interior; near both ends fewer windows overlap, and the kept edge samples need their own
//!    divisor;
//! 4. `center=True` means the first frame was centred on sample 0: `n_fft/2` samples are cut
//!    from each end, leaving `hop·(frames−1)` samples.

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner};

use crate::VocosError;

/// torch.istft refuses when the kept part of the window envelope falls to this or below
/// (the NOLA condition): dividing by it would amplify rounding noise without bound.
const NOLA_FLOOR: f32 = 1e-11;

/// The largest transform size accepted, far above any vocoder's, so that a size read from a
/// file cannot request an absurd plan.
pub const MAX_N_FFT: usize = 1 << 16;

/// The periodic Hann window `torch.hann_window(n)` returns: `0.5 − 0.5·cos(2πi/n)`, with `n`
/// (not `n − 1`) in the denominator, so the window tiles exactly under overlap-add.
pub fn hann_periodic(n: usize) -> Vec<f32> {
    (0..n).map(|i| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos()) as f32).collect()
}

/// An inverse STFT of one geometry (`n_fft`, `hop`) with its FFT plan and window made once,
/// so that decoding many utterances plans nothing again.
pub struct IstftPlan {
    n_fft: usize,
    hop: usize,
    window: Vec<f32>,
    window_sq: Vec<f32>,
    inverse: Arc<dyn ComplexToReal<f32>>,
}

impl std::fmt::Debug for IstftPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IstftPlan").field("n_fft", &self.n_fft).field("hop", &self.hop).finish()
    }
}

impl IstftPlan {
    /// Plans the inverse for an even `n_fft` (2..=`MAX_N_FFT`, 65536) and `1 ≤ hop ≤ n_fft`.
    pub fn new(n_fft: usize, hop: usize) -> Result<Self, VocosError> {
        let mut planner = RealFftPlanner::<f32>::new();
        Self::with_planner(n_fft, hop, &mut planner)
    }

    /// As [`IstftPlan::new`], reusing a planner's cached FFTs.
    pub fn with_planner(n_fft: usize, hop: usize, planner: &mut RealFftPlanner<f32>) -> Result<Self, VocosError> {
        if n_fft < 2 || !n_fft.is_multiple_of(2) || n_fft > MAX_N_FFT {
            return Err(VocosError::Istft(format!("n_fft must be even and in 2..={MAX_N_FFT}, got {n_fft}")));
        }
        if hop == 0 || hop > n_fft {
            return Err(VocosError::Istft(format!("hop must be in 1..={n_fft} (n_fft), got {hop}")));
        }
        let window = hann_periodic(n_fft);
        let window_sq = window.iter().map(|w| w * w).collect();
        Ok(IstftPlan { n_fft, hop, window, window_sq, inverse: planner.plan_fft_inverse(n_fft) })
    }

    /// The FFT size the plan was made for.
    pub fn n_fft(&self) -> usize {
        self.n_fft
    }

    /// Samples between frames.
    pub fn hop(&self) -> usize {
        self.hop
    }

    /// Bins of the one-sided spectrum: `n_fft/2 + 1`.
    pub fn bins(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// Samples produced from `frames` frames: `hop·(frames−1)`.
    pub fn output_len(&self, frames: usize) -> usize {
        self.hop.saturating_mul(frames.saturating_sub(1))
    }

    /// Inverts a one-sided spectrum given as real and imaginary parts, each `[frames, bins]`
    /// row-major (frame-major: the layout the vocoder head produces). `frames` must be ≥ 2:
    /// torch.istft raises on a single centred frame, whose output would be empty.
    pub fn process(&self, re: &[f32], im: &[f32], frames: usize) -> Result<Vec<f32>, VocosError> {
        let mut out = Vec::new();
        self.process_into(re, im, frames, &mut out)?;
        Ok(out)
    }

    /// As [`IstftPlan::process`], writing into `out` (cleared first) so a caller decoding in a
    /// loop can keep one output buffer.
    pub fn process_into(&self, re: &[f32], im: &[f32], frames: usize, out: &mut Vec<f32>) -> Result<(), VocosError> {
        let (n_fft, hop, bins) = (self.n_fft, self.hop, self.bins());
        if frames < 2 {
            return Err(VocosError::Input(format!(
                "the inverse STFT needs at least 2 frames, got {frames}: with center=True one frame yields no samples and torch.istft refuses it"
            )));
        }
        let values = frames.checked_mul(bins).ok_or_else(|| VocosError::Input(format!("{frames} frames × {bins} bins overflows")))?;
        if re.len() != values || im.len() != values {
            return Err(VocosError::Input(format!(
                "spectrum of {frames} frames × {bins} bins needs {values} real and {values} imaginary values, got {} and {}",
                re.len(),
                im.len()
            )));
        }
        // Bounded by the caller's slices: n_fft + hop·(frames−1) ≤ n_fft·frames < 2·values.
        let full = n_fft + hop * (frames - 1);
        let mut acc = vec![0f32; full];
        let mut envelope = vec![0f32; full];
        let mut spectrum = self.inverse.make_input_vec();
        let mut frame = self.inverse.make_output_vec();
        let mut scratch = self.inverse.make_scratch_vec();
        let scale = 1.0 / n_fft as f32;
        for (t, (re_t, im_t)) in re.chunks_exact(bins).zip(im.chunks_exact(bins)).enumerate() {
            for ((s, &r), &i) in spectrum.iter_mut().zip(re_t).zip(im_t) {
                *s = Complex::new(r, i);
            }
            // irfft reads DC and Nyquist as real numbers; realfft would flag the non-zero
            // imaginary parts the head always produces there (mag·sin(phase)).
            spectrum[0].im = 0.0;
            spectrum[bins - 1].im = 0.0;
            self.inverse
                .process_with_scratch(&mut spectrum, &mut frame, &mut scratch)
                .map_err(|e| VocosError::Istft(format!("frame {t}: {e}")))?;
            let start = t * hop;
            let acc_t = &mut acc[start..start + n_fft];
            let env_t = &mut envelope[start..start + n_fft];
            for n in 0..n_fft {
                acc_t[n] += frame[n] * scale * self.window[n];
                env_t[n] += self.window_sq[n];
            }
        }
        let pad = n_fft / 2;
        let len = self.output_len(frames);
        let kept_env = &envelope[pad..pad + len];
        if let Some((i, &e)) = kept_env.iter().enumerate().find(|(_, &e)| e <= NOLA_FLOOR) {
            return Err(VocosError::Istft(format!(
                "window envelope is {e:e} at output sample {i} (n_fft {n_fft}, hop {hop}): the windows do not overlap enough to invert (NOLA)"
            )));
        }
        out.clear();
        out.extend(acc[pad..pad + len].iter().zip(kept_env).map(|(a, e)| a / e));
        Ok(())
    }
}

/// `torch.istft(S, n_fft, hop, window=torch.hann_window(n_fft), center=True)` of a one-sided
/// spectrum given as `re`/`im`, each `[frames, n_fft/2+1]` row-major. Plans the FFT on every
/// call; use an [`IstftPlan`] to invert many spectra of the same geometry.
pub fn istft(re: &[f32], im: &[f32], frames: usize, n_fft: usize, hop: usize) -> Result<Vec<f32>, VocosError> {
    IstftPlan::new(n_fft, hop)?.process(re, im, frames)
}
