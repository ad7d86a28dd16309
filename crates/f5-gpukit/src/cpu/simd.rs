//! Vectorisable scalar kernels and the runtime dispatch that compiles them for AVX-512 or
//! AVX2+FMA when the CPU has them.
//!
//! The bodies are plain Rust written so that LLVM vectorises them (no branches in the hot
//! loops, fixed-width accumulators). `dispatch!` wraps such a body in `#[target_feature]`
//! copies and picks one at run time, so release binaries stay portable (no
//! `-C target-cpu=native`) and still use the wide units. Rust never contracts `a·b + c` into an
//! FMA on its own, so every copy computes bit-identical elementwise results.

/// Defines `pub fn $name(args)` that runs `$body` compiled for the best instruction set found.
macro_rules! dispatch {
    ($(#[$meta:meta])* pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        #[inline]
        pub fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                unsafe fn wide($($arg: $ty),*) $(-> $ret)? { generic($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? { generic($($arg),*) }
                if $crate::cpu::simd::has_avx512() {
                    // SAFETY: the CPU supports every feature `wide` was compiled for.
                    return unsafe { wide($($arg),*) };
                }
                if $crate::cpu::simd::has_avx2() {
                    // SAFETY: as above, for AVX2 and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            generic($($arg),*)
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub fn has_avx512() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl") && has_avx2()
}

#[cfg(target_arch = "x86_64")]
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
// ln 2 split so that n·LN2_HI is exact for |n| < 2^9 (Cody–Waite reduction).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
// 1.5·2^23: adding and subtracting it rounds an f32 of magnitude < 2^22 to the nearest integer
// without a branch or a rounding instruction SSE2 lacks.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `e^x` for f32 with a relative error below 2e-7 over the whole clamped range; inputs below
/// −87.3 give e^−87.3 (≈1e−38) instead of a subnormal, above 88.7 give e^88.7.
///
/// Branch-free so loops over it vectorise: softmax, SiLU and the tanh-GELU spend most of their
/// time here, and libm's `expf` does not vectorise.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    let n = (x * LOG2E + ROUND_MAGIC) - ROUND_MAGIC;
    let r = x - n * LN2_HI - n * LN2_LO;
    let z = r * r;
    // Cephes expf minimax polynomial for (e^r − 1 − r)/r² on |r| ≤ ln2/2.
    let p = ((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.5;
    let e = p * z + r + 1.0;
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    e * scale
}

/// `tanh(x)` through [`exp`]: absolute error below 3e-7, which is what the GELU and Mish uses need
/// (their outputs multiply tanh by x or add it to 1).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    // tanh(x) = 1 − 2/(e^{2x} + 1); odd symmetry keeps the large-|x| tail exact (±1).
    let a = x.abs();
    let t = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    t.copysign(x)
}

/// `erf(x)` by Abramowitz & Stegun 7.1.26 (absolute error ≤ 1.5e-7, ≤ 5e-7 in f32), the same approximation
/// PyTorch's vectorised CPU erf uses.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = ((((1.061_405_4 * t - 1.453_152_1) * t + 1.421_413_8) * t - 0.284_496_74) * t + 0.254_829_6) * t;
    let y = 1.0 - poly * exp(-a * a);
    y.copysign(x)
}

#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)))
}

#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// `x·tanh(softplus(x))` with PyTorch's softplus threshold: softplus(x) = x above 20.
#[inline(always)]
pub fn mish(x: f32) -> f32 {
    let sp = if x > 20.0 { x } else { exp(x).ln_1p() };
    x * tanh(sp)
}

dispatch! {
    pub fn map_gelu_erf(x: &mut [f32]) { for v in x.iter_mut() { *v = gelu_erf(*v); } }
}
dispatch! {
    pub fn map_gelu_tanh(x: &mut [f32]) { for v in x.iter_mut() { *v = gelu_tanh(*v); } }
}
dispatch! {
    pub fn map_silu(x: &mut [f32]) { for v in x.iter_mut() { *v = silu(*v); } }
}
dispatch! {
    // ln does not vectorise; Mish only runs on the conv position embedding, so a scalar ln is fine.
    pub fn map_mish(x: &mut [f32]) { for v in x.iter_mut() { *v = mish(*v); } }
}

dispatch! {
    /// Sum with 16 independent lanes: vectorises, and is more accurate than a serial sum.
    pub fn sum(x: &[f32]) -> f32 {
        let mut acc = [0.0f32; 16];
        let mut chunks = x.chunks_exact(16);
        for c in &mut chunks {
            for i in 0..16 { acc[i] += c[i]; }
        }
        let mut s = 0.0f32;
        for v in chunks.remainder() { s += v; }
        let mut half = 8;
        while half > 0 {
            for i in 0..half { acc[i] += acc[i + half]; }
            half /= 2;
        }
        acc[0] + s
    }
}

dispatch! {
    /// Σ a·b with 16 independent lanes (the LSTM's recurrent matrix-vector product).
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0.0f32; 16];
        let mut ca = a.chunks_exact(16);
        let mut cb = b.chunks_exact(16);
        for (x, y) in (&mut ca).zip(&mut cb) {
            for i in 0..16 { acc[i] += x[i] * y[i]; }
        }
        let mut s = 0.0f32;
        for (x, y) in ca.remainder().iter().zip(cb.remainder()) { s += x * y; }
        let mut half = 8;
        while half > 0 {
            for i in 0..half { acc[i] += acc[i + half]; }
            half /= 2;
        }
        acc[0] + s
    }
}

dispatch! {
    /// Σ (x − mean)², the second pass of a two-pass variance.
    pub fn sum_sq_dev(x: &[f32], mean: f32) -> f32 {
        let mut acc = [0.0f32; 16];
        let mut chunks = x.chunks_exact(16);
        for c in &mut chunks {
            for i in 0..16 { let d = c[i] - mean; acc[i] += d * d; }
        }
        let mut s = 0.0f32;
        for v in chunks.remainder() { let d = v - mean; s += d * d; }
        let mut half = 8;
        while half > 0 {
            for i in 0..half { acc[i] += acc[i + half]; }
            half /= 2;
        }
        acc[0] + s
    }
}

dispatch! {
    /// `out = (x − mean)·rstd·(1 + scale) + shift`: the adaLN row.
    pub fn modulate_row(x: &[f32], mean: f32, rstd: f32, scale: &[f32], shift: &[f32], out: &mut [f32]) {
        for (((o, &v), &sc), &sh) in out.iter_mut().zip(x).zip(scale).zip(shift) {
            *o = (v - mean) * rstd * (1.0 + sc) + sh;
        }
    }
}

dispatch! {
    /// `out = (x − mean)·rstd·w + b`: the affine LayerNorm row.
    pub fn affine_row(x: &[f32], mean: f32, rstd: f32, w: &[f32], b: &[f32], out: &mut [f32]) {
        for (((o, &v), &wi), &bi) in out.iter_mut().zip(x).zip(w).zip(b) {
            *o = (v - mean) * rstd * wi + bi;
        }
    }
}

dispatch! {
    pub fn plain_norm_row(x: &[f32], mean: f32, rstd: f32, out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) { *o = (v - mean) * rstd; }
    }
}

dispatch! {
    /// `x += g ⊙ y`.
    pub fn gated_add_row(x: &mut [f32], y: &[f32], g: &[f32]) {
        for ((xi, &yi), &gi) in x.iter_mut().zip(y).zip(g) { *xi += gi * yi; }
    }
}

dispatch! {
    /// In place `s = exp(s − max)`, returning Σ s: one softmax row without the division, which
    /// the caller folds into the output scaling.
    pub fn exp_shift_sum(s: &mut [f32], max: f32) -> f32 {
        let mut acc = [0.0f32; 16];
        let mut chunks = s.chunks_exact_mut(16);
        for c in &mut chunks {
            for i in 0..16 { let e = exp(c[i] - max); c[i] = e; acc[i] += e; }
        }
        let mut tail = 0.0f32;
        for v in chunks.into_remainder() { let e = exp(*v - max); *v = e; tail += e; }
        let mut half = 8;
        while half > 0 {
            for i in 0..half { acc[i] += acc[i + half]; }
            half /= 2;
        }
        acc[0] + tail
    }
}

dispatch! {
    pub fn max(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; 16];
        let mut chunks = x.chunks_exact(16);
        for c in &mut chunks {
            for i in 0..16 { acc[i] = acc[i].max(c[i]); }
        }
        let mut m = f32::NEG_INFINITY;
        for &v in chunks.remainder() { m = m.max(v); }
        for a in acc { m = m.max(a); }
        m
    }
}

dispatch! {
    /// `y += a·x`.
    pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
        for (yi, &xi) in y.iter_mut().zip(x) { *yi += a * xi; }
    }
}

dispatch! {
    /// `acc += x²` elementwise: the GRN column norms, one row at a time.
    pub fn add_squares(acc: &mut [f32], x: &[f32]) {
        for (a, &v) in acc.iter_mut().zip(x) { *a += v * v; }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each approximation is checked on a dense grid against f64 libm; the bounds are the
    // documented error of the approximation with a little float slack.
    #[test]
    fn exp_relative_error_below_2e7() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
    }

    #[test]
    fn tanh_erf_absolute_error() {
        let mut worst_t = 0.0f64;
        let mut worst_e = 0.0f64;
        let mut x = -12.0f32;
        while x < 12.0 {
            worst_t = worst_t.max((tanh(x) as f64 - (x as f64).tanh()).abs());
            worst_e = worst_e.max((erf(x) as f64 - erf64(x as f64)).abs());
            x += 0.00731;
        }
        assert!(worst_t < 3e-7, "tanh {worst_t}");
        // A&S 7.1.26 is good to 1.5e-7 in exact arithmetic; f32 evaluation adds a few ulp.
        assert!(worst_e < 5e-7, "erf {worst_e}");
    }

    /// erf by its Maclaurin series / continued fraction: a reference independent of the
    /// approximation under test.
    fn erf64(x: f64) -> f64 {
        if x.abs() < 3.0 {
            let mut sum = 0.0;
            let mut term = x;
            let mut n = 0.0;
            while term.abs() > 1e-17 {
                sum += term / (2.0 * n + 1.0);
                n += 1.0;
                term *= -x * x / n;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            // erfc continued fraction (Lentz), accurate for |x| ≥ 3.
            let a = x.abs();
            let mut f = a;
            for k in (1..60).rev() {
                f = a + (k as f64 / 2.0) / f;
            }
            let erfc = (-a * a).exp() / f / std::f64::consts::PI.sqrt();
            (1.0 - erfc).copysign(x)
        }
    }

    #[test]
    fn sums_match_serial_f64() {
        let x: Vec<f32> = (0..1037).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        let want: f64 = x.iter().map(|&v| v as f64).sum();
        assert!((sum(&x) as f64 - want).abs() < 1e-4);
        assert_eq!(max(&x), x.iter().cloned().fold(f32::MIN, f32::max));
    }
}
