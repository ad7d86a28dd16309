//! The FFT convolution against an f64 direct convolution.
//!
//! Tolerance: relative L2 error over the whole output, 2e-6. The FFT's roundings are relative to
//! a tile's norm, not to each output's terms, so a per-output bound like the direct kernel's
//! does not hold; over a signal each of the 2 × 6 butterfly stages and the per-bin sums of
//! `2·c_in` products add errors of a few f32 ulps (2⁻²⁴ ≈ 6e-8) of the norm, measured 2–3e-7.
//! The wrong variants (taps reversed: a convolution instead of a correlation; taps one row off;
//! the dilation ignored; the bias left out) are O(1) away.

use super::{conv1d_fft, suits, TILE};
use crate::spec::{Conv1dSpec, PadMode};

const TOLERANCE: f64 = 2e-6;

/// Uniform in [−1, 1), deterministic (xorshift).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    Exact,
    TapsReversed,
    TapOffByOne,
    DilationIgnored,
    NoBias,
}

fn conv_f64(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: &[f32], variant: Variant) -> Vec<f64> {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, pad, dilation, .. } = *spec;
    let n_out = spec.n_out();
    let d = if variant == Variant::DilationIgnored { 1 } else { dilation };
    let mut y = vec![0.0f64; batch * n_out * c_out];
    for b in 0..batch {
        for t in 0..n_out {
            for co in 0..c_out {
                let mut acc = if variant == Variant::NoBias { 0.0 } else { bias[co] as f64 };
                for k in 0..kernel {
                    let tap = match variant {
                        Variant::TapsReversed => kernel - 1 - k,
                        _ => k,
                    };
                    let shift = usize::from(variant == Variant::TapOffByOne);
                    let Some(src) = (t + k * d + shift).checked_sub(pad).filter(|&s| s < n) else { continue };
                    for ci in 0..c_in {
                        acc += x[(b * n + src) * c_in + ci] as f64 * w[(co * c_in + ci) * kernel + tap] as f64;
                    }
                }
                y[(b * n_out + t) * c_out + co] = acc;
            }
        }
    }
    y
}

fn rel_l2(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

fn check(spec: Conv1dSpec) {
    assert!(suits(&spec), "{spec:?} should take the FFT path");
    let x = values(spec.batch * spec.n * spec.c_in, 1);
    let w = values(spec.c_out * spec.c_in * spec.kernel, 2);
    let bias = values(spec.c_out, 3);
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    conv1d_fft(&spec, &x, &w, Some(&bias), &mut y);
    let err = rel_l2(&y, &conv_f64(&spec, &x, &w, &bias, Variant::Exact));
    assert!(err <= TOLERANCE, "{spec:?}: rel-L2 {err:e}");
    for wrong in [Variant::TapsReversed, Variant::TapOffByOne, Variant::DilationIgnored, Variant::NoBias] {
        if wrong == Variant::DilationIgnored && spec.dilation == 1 {
            continue;
        }
        let off = rel_l2(&y, &conv_f64(&spec, &x, &w, &bias, wrong));
        assert!(off > 100.0 * TOLERANCE, "{spec:?}: {wrong:?} is only {off:e} away");
    }
}

#[test]
fn matches_f64_for_kokoro_like_shapes() {
    // "Same" padding as Kokoro's resblocks: pad = d·(K − 1) / 2.
    for (c, kernel, dilation, n) in [(64, 7, 1, 300), (64, 11, 3, 400), (32, 7, 5, 500), (96, 11, 1, 2 * TILE + 17)] {
        let spec = Conv1dSpec::new(1, n, c, c, kernel).dilation(dilation).pad(dilation * (kernel - 1) / 2);
        check(spec);
    }
}

#[test]
fn matches_f64_with_other_channel_counts_batches_and_padding() {
    // c_in ≠ c_out, two items, no padding and uneven padding, the widest kernel.
    check(Conv1dSpec::new(2, 260, 48, 80, 9).pad(2));
    check(Conv1dSpec::new(1, 300, 34, 36, 5).dilation(2));
    check(Conv1dSpec::new(1, 400, 32, 32, 33).pad(16));
}

#[test]
fn runs_without_bias_and_leaves_no_stale_values() {
    let spec = Conv1dSpec::new(1, 333, 64, 64, 7).dilation(3).pad(9);
    let x = values(spec.n * 64, 4);
    let w = values(64 * 64 * 7, 5);
    let zero = vec![0.0f32; 64];
    let want = conv_f64(&spec, &x, &w, &zero, Variant::Exact);
    // Twice over one output buffer: every row written each time, not accumulated.
    let mut y = vec![f32::NAN; spec.n_out() * 64];
    for _ in 0..2 {
        conv1d_fft(&spec, &x, &w, None, &mut y);
        let err = rel_l2(&y, &want);
        assert!(err <= TOLERANCE, "rel-L2 {err:e}");
    }
}

#[test]
fn leaves_what_it_cannot_compute_to_the_other_paths() {
    let base = Conv1dSpec::new(1, 1000, 64, 64, 7).pad(3);
    assert!(suits(&base));
    assert!(!suits(&Conv1dSpec { kernel: 3, pad: 1, ..base }), "3 taps do not pay");
    assert!(!suits(&Conv1dSpec { kernel: 35, ..base }), "past 33 taps a tile has too few outputs");
    assert!(!suits(&Conv1dSpec { stride: 2, ..base }));
    assert!(!suits(&Conv1dSpec { groups: 2, ..base }));
    assert!(!suits(&Conv1dSpec { c_in: 63, ..base }), "odd channel counts do not pair up");
    assert!(suits(&Conv1dSpec { c_in: 256, c_out: 256, ..base }));
    assert!(!suits(&Conv1dSpec { c_in: 512, c_out: 512, kernel: 5, pad: 2, ..base }), "a 69 MB filter spectrum");
    assert!(!suits(&base.pad_mode(PadMode::Reflect)));
    assert!(!suits(&Conv1dSpec { n: 40, ..base }), "too few rows for one tile");
}
