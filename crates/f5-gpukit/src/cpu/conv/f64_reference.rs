//! A direct convolution in f64 for the fast paths' tests to compare against, and the wrong
//! variants each test shows it would catch (taps reversed: a convolution instead of a
//! correlation; taps one row off; the dilation ignored; the bias left out).

use crate::spec::Conv1dSpec;

/// Uniform in [−1, 1), deterministic (xorshift).
pub(crate) fn values(len: usize, seed: u64) -> Vec<f32> {
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
pub(crate) enum Variant {
    Exact,
    TapsReversed,
    TapOffByOne,
    DilationIgnored,
    NoBias,
}

pub(crate) fn conv_f64(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: &[f32], variant: Variant) -> Vec<f64> {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, pad, stride, dilation, .. } = *spec;
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
                    let Some(src) = (t * stride + k * d + shift).checked_sub(pad).filter(|&s| s < n) else { continue };
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

pub(crate) fn rel_l2(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

/// Runs `conv` on `spec` with random inputs and a bias, and asserts its output is within
/// `tolerance` (rel-L2) of the f64 convolution while every wrong variant is over 100× that away.
pub(crate) fn check_against_f64(spec: Conv1dSpec, tolerance: f64, conv: impl Fn(&Conv1dSpec, &[f32], &[f32], Option<&[f32]>, &mut [f32])) {
    let x = values(spec.batch * spec.n * spec.c_in, 1);
    let w = values(spec.c_out * spec.c_in * spec.kernel, 2);
    let bias = values(spec.c_out, 3);
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    conv(&spec, &x, &w, Some(&bias), &mut y);
    let err = rel_l2(&y, &conv_f64(&spec, &x, &w, &bias, Variant::Exact));
    assert!(err <= tolerance, "{spec:?}: rel-L2 {err:e}");
    for wrong in [Variant::TapsReversed, Variant::TapOffByOne, Variant::DilationIgnored, Variant::NoBias] {
        if wrong == Variant::DilationIgnored && spec.dilation == 1 {
            continue;
        }
        let off = rel_l2(&y, &conv_f64(&spec, &x, &w, &bias, wrong));
        assert!(off > 100.0 * tolerance, "{spec:?}: {wrong:?} is only {off:e} away");
    }
}

/// Runs `conv` on `spec` without a bias twice over one output buffer (first filled with NaN) and
/// asserts both results are within `tolerance` of the f64 convolution: every output row is
/// written each time, none left stale or accumulated.
pub(crate) fn check_without_bias_twice(
    spec: Conv1dSpec,
    tolerance: f64,
    conv: impl Fn(&Conv1dSpec, &[f32], &[f32], Option<&[f32]>, &mut [f32]),
) {
    let x = values(spec.batch * spec.n * spec.c_in, 4);
    let w = values(spec.c_out * spec.c_in * spec.kernel, 5);
    let zero = vec![0.0f32; spec.c_out];
    let want = conv_f64(&spec, &x, &w, &zero, Variant::Exact);
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    for _ in 0..2 {
        conv(&spec, &x, &w, None, &mut y);
        let err = rel_l2(&y, &want);
        assert!(err <= tolerance, "{spec:?}: rel-L2 {err:e}");
    }
}

/// The f32 CPU backend's `instance_norm_snake_conv1d` and `instance_norm_snake_conv1d_add` on
/// `conv` (a 'same' convolution from `c` to `c` channels, two or more batch items) against
/// instance norm + Snake, convolution (and `axpy`) apart: the same bits, with neither the input
/// nor the scratch written (the rows are normalised as the convolution gathers them). The batch items are offset and scaled apart, so
/// one item's statistics would not fit another's.
pub(crate) fn check_fused_norm_conv(conv: Conv1dSpec) {
    use crate::{Backend, CpuBackend, InstanceNormSpec};
    let kit = CpuBackend::new();
    let Conv1dSpec { batch, n, c_in: c, .. } = conv;
    assert!(batch >= 2 && conv.c_out == c && conv.n_out() == n);
    let norm = InstanceNormSpec { batch, n, c, eps: 1e-5 };
    let mut x = values(batch * n * c, 7);
    for (b, item) in x.chunks_mut(n * c).enumerate() {
        item.iter_mut().for_each(|v| *v = *v * (1.0 + 3.0 * b as f32) + 2.5 * b as f32);
    }
    let (style, alpha) = (values(batch * 2 * c, 8), values(c, 9).iter().map(|a| 1.0 + 0.4 * a).collect::<Vec<_>>());
    let (w, bias, y0) = (values(c * c * conv.kernel, 10).iter().map(|v| v * 0.05).collect::<Vec<_>>(), values(c, 11), values(x.len(), 12));
    let mut t = vec![0.0; x.len()];
    kit.instance_norm_snake(&norm, &x, None, Some(&style), &alpha, &mut t).unwrap();
    let mut out = vec![0.0; x.len()];
    kit.conv1d(&conv, &t, &w, Some(&bias), &mut out).unwrap();
    let mut apart = y0.clone();
    let len = apart.len();
    kit.axpy(1.0, &out, &mut apart, len).unwrap();

    let (mut scratch, mut plain) = (vec![f32::NAN; x.len()], vec![f32::NAN; x.len()]);
    kit.instance_norm_snake_conv1d(&norm, &x, None, Some(&style), &alpha, &conv, &w, Some(&bias), &mut scratch, &mut plain).unwrap();
    assert!(plain.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()), "{conv:?}: the fused step differs from the two ops");
    assert!(scratch.iter().all(|v| v.is_nan()), "{conv:?}: the fused step wrote the scratch");

    let (mut consumed, mut scratch, mut fused) = (x.clone(), vec![f32::NAN; x.len()], y0);
    kit.instance_norm_snake_conv1d_add(&norm, &mut consumed, None, Some(&style), &alpha, &conv, &w, Some(&bias), &mut scratch, &mut fused)
        .unwrap();
    assert!(
        fused.iter().zip(&apart).all(|(a, b)| a.to_bits() == b.to_bits()),
        "{conv:?}: the fused residual step differs from the three ops"
    );
    assert_eq!(consumed, x, "{conv:?}: the fused path wrote its input");
    assert!(scratch.iter().all(|v| v.is_nan()), "{conv:?}: the fused path wrote the scratch");
}
