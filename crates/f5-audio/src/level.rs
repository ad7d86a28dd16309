//! Loudness helpers: F5's reference RMS normalisation and a one-shot peak limiter.

/// F5-TTS's `target_rms`.
pub const TARGET_RMS: f32 = 0.1;

/// `torch.sqrt(torch.mean(torch.square(x)))`, accumulated in f64 and rounded once. Empty input
/// gives 0.
pub fn rms(samples: &[f32]) -> f32 {
    if samples.is_empty() {
        return 0.0;
    }
    let sum: f64 = samples.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    ((sum / samples.len() as f64) as f32).sqrt()
}

/// What [`normalize_rms`] did, so the generated audio can be scaled back
/// (`wave * rms / target_rms` in F5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsNormalization {
    /// RMS of the input before any change.
    pub input_rms: f32,
    /// The level the input was raised to when quieter (F5's reference uses 0.1).
    pub target_rms: f32,
    /// True when the input was quieter than the target and was raised.
    pub raised: bool,
}

impl RmsNormalization {
    /// F5's output step: `if rms < target_rms: wave = wave * rms / target_rms` (f32, that order).
    pub fn undo(&self, wave: &mut [f32]) {
        if self.raised {
            for x in wave {
                *x = (*x * self.input_rms) / self.target_rms;
            }
        }
    }

    /// The same for the float64 cross-faded output.
    pub fn undo_f64(&self, wave: &mut [f64]) {
        if self.raised {
            for x in wave {
                *x = (*x * f64::from(self.input_rms)) / f64::from(self.target_rms);
            }
        }
    }
}

/// F5's reference rule: `if rms < target_rms: audio = audio * target_rms / rms`. Loud references
/// are never turned down. A silent input (rms 0) is left alone instead of dividing by zero
/// (torch would produce NaN).
pub fn normalize_rms(samples: &mut [f32], target_rms: f32) -> RmsNormalization {
    let input_rms = rms(samples);
    let raised = input_rms < target_rms && input_rms > 0.0;
    if raised {
        for x in samples.iter_mut() {
            *x = (*x * target_rms) / input_rms;
        }
    }
    RmsNormalization { input_rms, target_rms, raised }
}

/// Largest absolute sample (0 for empty input).
pub fn peak(samples: &[f32]) -> f32 {
    samples.iter().fold(0.0f32, |m, &x| m.max(x.abs()))
}

/// The largest value a 16-bit writer maps below clipping: 32767/32768 (libsndfile scales by 32767
/// on write, so anything above 1.0 would clip or wrap).
pub const PCM16_CEILING: f32 = 1.0;

/// Scales the whole signal down once so that its peak is `ceiling`, when it exceeds it.
/// Returns the gain applied (1.0 when nothing was done). No per-sample compression, so the
/// waveform shape is unchanged.
pub fn limit_peak(samples: &mut [f32], ceiling: f32) -> f32 {
    let p = peak(samples);
    if p > ceiling && p.is_finite() {
        let gain = ceiling / p;
        for x in samples.iter_mut() {
            *x *= gain;
        }
        gain
    } else {
        1.0
    }
}

/// [`limit_peak`] for the float64 output of the cross-fade.
pub fn limit_peak_f64(samples: &mut [f64], ceiling: f64) -> f64 {
    let p = samples.iter().fold(0.0f64, |m, &x| m.max(x.abs()));
    if p > ceiling && p.is_finite() {
        let gain = ceiling / p;
        for x in samples.iter_mut() {
            *x *= gain;
        }
        gain
    } else {
        1.0
    }
}
