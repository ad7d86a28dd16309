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
pub(crate) use dispatch;

/// Proof that this CPU executes AVX-512 F and VL: only [`Avx512F::detect`] makes one, so
/// holding it makes the kernels that take it (`target_feature` `avx512f`, some with `avx512vl`)
/// sound to call. VL matters for register allocation: without it, a value whose low 128 or 256
/// bits feed an instruction (a horizontal sum) must live in zmm0–15, and LLVM spilled a 24-
/// accumulator tile to the stack for that.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512F(());

impl Avx512F {
    pub(crate) fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            (std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl")).then_some(Avx512F(()))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }
}

/// Proof that this CPU executes AVX2 and FMA: only [`Avx2Fma::detect`] makes one, so holding
/// it makes the kernels that take it (`target_feature` `avx2,fma`) sound to call. For the
/// hand-written kernels that have an AVX2 form beside the AVX-512 one (the few-row GEMM's
/// broadcast kernel, the direct convolution's tile kernel), on CPUs without AVX-512.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2Fma(());

impl Avx2Fma {
    pub(crate) fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            has_avx2().then_some(Avx2Fma(()))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }
}

/// The instruction set a hand-written f32 kernel with two forms runs on (the few-row GEMM's
/// broadcast kernel, the direct convolution's tile kernel): AVX-512 F + VL, or AVX2 + FMA,
/// whose form sums the same products in the same order, so it gives the AVX-512 form's bits.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Isa {
    Avx512(Avx512F),
    Avx2(Avx2Fma),
}

impl Isa {
    /// The widest this CPU has, or `None` (then neither form runs).
    pub(crate) fn detect() -> Option<Self> {
        Avx512F::detect().map(Isa::Avx512).or_else(|| Avx2Fma::detect().map(Isa::Avx2))
    }

    /// Every form this CPU runs, for the tests: AVX-512 where present, and AVX2 (which every
    /// AVX-512 CPU has too), so that an AVX-512 machine tests both. Says so where it is none.
    #[cfg(test)]
    pub(crate) fn every() -> Vec<Self> {
        let found: Vec<Isa> = Avx512F::detect().map(Isa::Avx512).into_iter().chain(Avx2Fma::detect().map(Isa::Avx2)).collect();
        if found.is_empty() {
            println!("skipped: this CPU has neither AVX-512 F nor AVX2 + FMA (the kernels with both forms do not run here)");
        }
        found
    }
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
/// time here, and libm's `expf` does not vectorise. The power of two is built from the bits of
/// the rounded exponent instead of a float → int cast: Rust's `as i32` saturates and maps NaN
/// to 0, which LLVM emits as one scalar conversion per lane, so a loop over a cast-based exp is
/// only partly vectorised. `x·log2(e) + 1.5·2^23` has ulp 1, so its low mantissa bits hold
/// `n + 2^22` exactly (|n| ≤ 128 after the clamp); the test `exp_is_the_cast_form_bit_for_bit`
/// holds it to the cast-based form.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    let shifted = x * LOG2E + ROUND_MAGIC;
    let n = shifted - ROUND_MAGIC;
    let r = x - n * LN2_HI - n * LN2_LO;
    let z = r * r;
    // Cephes expf minimax polynomial for (e^r − 1 − r)/r² on |r| ≤ ln2/2.
    let p = ((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.5;
    let e = p * z + r + 1.0;
    // bits(shifted) = bits(1.5·2^23) + n; the biased exponent n + 127 shifted into place.
    let scale = f32::from_bits(shifted.to_bits().wrapping_sub(ROUND_MAGIC.to_bits()).wrapping_add(127) << 23);
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

/// Past this magnitude `sin_f32`'s two-part reduction by π/2 loses accuracy (`j·PIO2_HI` stops
/// being exact at |j| ≥ 2^20); callers send such arguments to libm instead.
pub const SIN_FAST_LIMIT: f32 = 1.0e6;

/// 1.5·2⁵²: adding it rounds an f64 to an integer held in the low mantissa bits (two's
/// complement), subtracting it again gives that integer as an f64.
const ROUND_MAGIC_F64: f64 = 6_755_399_441_055_744.0;
/// π/2 in two parts (fdlibm's): the first with 33 significant bits, so j·PIO2_HI is exact for
/// |j| < 2²⁰; the second π/2's remainder to ~1e-26.
const PIO2_HI: f64 = 1.570_796_326_734_125_6;
const PIO2_LO: f64 = 6.077_100_506_506_192e-11;
/// ln 2 in two parts, the first with 21 trailing zero bits, so n·LN2_HI_F64 is exact for the
/// exponents n of any finite f64.
const LN2_HI_F64: f64 = 6.931_471_803_691_238e-1;
const LN2_LO_F64: f64 = 1.908_214_929_270_587_7e-10;

/// `x = j·π/2 + r` with |r| ≤ π/4 (up to rounding) and the quadrant j mod 4 in the low bits:
/// the reduction of [`sin_f32`] and [`sin_cos_f64`], exact in its first step for |x| < 2²⁰.
#[inline(always)]
fn reduce_pio2_f64(x: f64) -> (f64, u32) {
    let jm = x * std::f64::consts::FRAC_2_PI + ROUND_MAGIC_F64;
    let j = jm - ROUND_MAGIC_F64;
    ((x - j * PIO2_HI) - j * PIO2_LO, jm.to_bits() as u32)
}

/// `sin(x)` for f32, through f64: the argument is reduced by π/2 (fdlibm's two-part constant,
/// exact for |x| < [`SIN_FAST_LIMIT`]) and both polynomials are evaluated in f64 with a
/// truncation error below 1e-11, so the f32 result is the correctly rounded sine except where
/// it lies within ~1e-11 of a rounding boundary (then one ulp off, as libm's sinf may be).
/// Branch-free so that loops over it vectorise (libm's `sinf` does not); NaN and ±∞ give NaN.
#[inline(always)]
pub fn sin_f32(x: f32) -> f32 {
    let (r, quadrant) = reduce_pio2_f64(x as f64);
    let z = r * r;
    // Taylor series on |r| ≤ π/4: sin to r¹¹ (error ≤ r¹³/13! < 7e-12), cos to r¹² (< 2e-12).
    let s = r + r * z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (1.0 / 362_880.0 + z * (-1.0 / 39_916_800.0)))));
    let c = 1.0 - 0.5 * z
        + z * z * (1.0 / 24.0 + z * (-1.0 / 720.0 + z * (1.0 / 40_320.0 + z * (-1.0 / 3_628_800.0 + z * (1.0 / 479_001_600.0)))));
    let v = if quadrant & 1 == 0 { s } else { c };
    let v = if quadrant & 2 == 0 { v } else { -v };
    v as f32
}

/// `ln(y)` for a positive normal f64, within one ulp of the exact logarithm (the classic
/// reduction: y = 2^k·(1 + f) with 1 + f in [√2/2, √2), s = f/(2 + f),
/// ln(1 + f) = f − (f²/2 − s·(f²/2 + R(s²))) with R = Σ 2/(2i+1)·s^{2i}, the series of
/// 2·atanh(s) − 2s over s, to s²⁰: the rest is below 2e-18 of the result for |s| ≤ 0.1716).
/// Branch-free, so loops over it vectorise. Zero, negative, subnormal and non-finite inputs
/// are outside its domain (callers give it 1 − u for a uniform u < 1, which is none of them).
#[inline(always)]
pub fn ln_f64(y: f64) -> f64 {
    // The mantissa bits of √2: a mantissa at or above them is halved (and k raised by one).
    const SQRT2_MANTISSA: u64 = 0x6_a09e_667f_3bcd;
    const MANTISSA: u64 = (1 << 52) - 1;
    let bits = y.to_bits();
    let mantissa = bits & MANTISSA;
    let halve = (mantissa >= SQRT2_MANTISSA) as u64;
    let k = ((bits >> 52) as i64 - 1023 + halve as i64) as f64;
    // 1 + f in [√2/2, √2): f = m − 1 is exact (Sterbenz).
    let f = f64::from_bits(mantissa | ((1023 - halve) << 52)) - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    const C: [f64; 10] =
        [2.0 / 3.0, 2.0 / 5.0, 2.0 / 7.0, 2.0 / 9.0, 2.0 / 11.0, 2.0 / 13.0, 2.0 / 15.0, 2.0 / 17.0, 2.0 / 19.0, 2.0 / 21.0];
    let mut r = C[9];
    for &c in C[..9].iter().rev() {
        r = r * z + c;
    }
    let r = r * z;
    let hfsq = 0.5 * f * f;
    k * LN2_HI_F64 - ((hfsq - (s * (hfsq + r) + k * LN2_LO_F64)) - f)
}

/// `(sin θ, cos θ)` in f64 for 0 ≤ θ ≤ 8 (Box–Muller's angles, 2π·u), each within one ulp
/// of the exact value or 1e-25 of it: θ is reduced by π/2 as [`sin_f32`]'s argument is
/// ([`reduce_pio2_f64`]), whose second constant is π/2's remainder to 1e-26 (so within ~1e-10 of a multiple
/// of π/2, where the result is that small, the last digits can be off; rounded to f32 that
/// changes a value about once in 10¹⁷ draws), then the Taylor series of sin to r¹⁷ and cos to
/// r¹⁶ on |r| ≤ π/4 (truncation below 1e-18), the cosine's leading `1 − r²/2` carried with
/// its rounding error. Branch-free.
#[inline(always)]
pub fn sin_cos_f64(theta: f64) -> (f64, f64) {
    // 1/(2k+1)! and 1/(2k)! with their signs, k = 1…8 and 2…8.
    const S: [f64; 8] = [
        -1.0 / 6.0,
        1.0 / 120.0,
        -1.0 / 5_040.0,
        1.0 / 362_880.0,
        -1.0 / 39_916_800.0,
        1.0 / 6_227_020_800.0,
        -1.0 / 1_307_674_368_000.0,
        1.0 / 355_687_428_096_000.0,
    ];
    const C: [f64; 7] = [
        1.0 / 24.0,
        -1.0 / 720.0,
        1.0 / 40_320.0,
        -1.0 / 3_628_800.0,
        1.0 / 479_001_600.0,
        -1.0 / 87_178_291_200.0,
        1.0 / 20_922_789_888_000.0,
    ];
    let (r, quadrant) = reduce_pio2_f64(theta);
    let z = r * r;
    let mut ps = S[7];
    for &c in S[..7].iter().rev() {
        ps = ps * z + c;
    }
    let sin_r = r + r * z * ps;
    let mut pc = C[6];
    for &c in C[..6].iter().rev() {
        pc = pc * z + c;
    }
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    let cos_r = w + (((1.0 - w) - hz) + z * z * pc);
    // θ = r + j·π/2: odd quadrants swap the two; sin is negated in quadrants 2, 3 and cos in 1, 2.
    let (s, c) = if quadrant & 1 == 0 { (sin_r, cos_r) } else { (cos_r, sin_r) };
    let s = if quadrant & 2 == 0 { s } else { -s };
    let c = if quadrant.wrapping_add(1) & 2 == 0 { c } else { -c };
    (s, c)
}

/// `atan(x)` in f64 within about an ulp: Cephes' reduction (|x| past tan(3π/8) to −1/x around
/// π/2, past 0.66 to (x − 1)/(x + 1) around π/4, each offset's lost low bits added back) and
/// its rational approximation of degree 4/5 on |x| ≤ 0.66. Branch-free, one division for the
/// reduction and one for the ratio, so loops over it vectorise. ±∞ gives ±π/2, NaN NaN.
#[inline(always)]
pub fn atan_f64(x: f64) -> f64 {
    const P: [f64; 5] =
        [-8.750_608_600_031_904e-1, -1.615_753_718_733_365e1, -7.500_855_792_314_705e1, -1.228_866_684_490_136e2, -6.485_021_904_942_025e1];
    const Q: [f64; 5] =
        [2.485_846_490_142_306e1, 1.650_270_098_316_988e2, 4.328_810_604_912_903e2, 4.853_903_996_359_137e2, 1.945_506_571_482_614e2];
    // π/2 − fl(π/2), the bits the offset loses.
    const MOREBITS: f64 = 6.123_233_995_736_766e-17;
    const TAN_3PI_8: f64 = 2.414_213_562_373_095;
    let a = x.abs();
    let (big, mid) = (a > TAN_3PI_8, a > 0.66);
    let num = if big {
        -1.0
    } else if mid {
        a - 1.0
    } else {
        a
    };
    let den = if big {
        a
    } else if mid {
        a + 1.0
    } else {
        1.0
    };
    let r = num / den;
    let (offset, low) = if big {
        (std::f64::consts::FRAC_PI_2, MOREBITS)
    } else if mid {
        (std::f64::consts::FRAC_PI_4, 0.5 * MOREBITS)
    } else {
        (0.0, 0.0)
    };
    let z = r * r;
    let p = (((P[0] * z + P[1]) * z + P[2]) * z + P[3]) * z + P[4];
    let q = ((((z + Q[0]) * z + Q[1]) * z + Q[2]) * z + Q[3]) * z + Q[4];
    let t = r * (z * p / q) + r + low;
    (offset + t).copysign(x)
}

/// `atan2(y, x)` of f32 arguments through f64 ([`atan_f64`] of y/x, moved by ±π for x < 0),
/// rounded once to f32: the correctly rounded angle except within ~1e-15 of a rounding boundary
/// (libm's atan2f, and PyTorch's vectorised one, are within an ulp of it). Signed zeros as IEEE
/// 754 has them (atan2(±0, −0) = ±π, atan2(±y, ±0) = ±π/2); for finite arguments (an infinity
/// gives NaN or a wrong angle: callers take libm's there).
#[inline(always)]
pub fn atan2_f32(y: f32, x: f32) -> f32 {
    let (yd, xd) = (y as f64, x as f64);
    let t = atan_f64(yd / xd);
    let pi = std::f64::consts::PI.copysign(yd);
    let angle = if xd < 0.0 { t + pi } else { t };
    let angle = if xd == 0.0 {
        if yd == 0.0 {
            if xd.is_sign_negative() {
                pi
            } else {
                yd
            }
        } else {
            std::f64::consts::FRAC_PI_2.copysign(yd)
        }
    } else {
        angle
    };
    angle as f32
}

/// `hypot(x, y)` of f32 arguments as glibc's `hypotf` computes it for finite ones: both
/// squares exact in f64, their sum and root rounded in f64, then to f32.
#[inline(always)]
pub fn hypot_f32(x: f32, y: f32) -> f32 {
    let (x, y) = (x as f64, y as f64);
    (x * x + y * y).sqrt() as f32
}

dispatch! {
    /// `mag = hypot(re, im)`, `phase = atan2(im, re)` elementwise (a spectrum in polar form):
    /// [`hypot_f32`] (libm's bits) and [`atan2_f32`] (correctly rounded but for ~1e-15 of
    /// boundaries), vectorised; a value with an infinite or NaN part takes libm's `hypotf` and
    /// `atan2f`. Kokoro's source spectrum is 1.7 million of these for 32 s, where libm's calls
    /// one at a time cost ~40 ms.
    pub fn polar_f32(re: &[f32], im: &[f32], mag: &mut [f32], phase: &mut [f32]) {
        let mut finite = true;
        for (((&r, &i), m), p) in re.iter().zip(im).zip(mag.iter_mut()).zip(phase.iter_mut()) {
            finite &= r.is_finite() & i.is_finite();
            *m = hypot_f32(r, i);
            *p = atan2_f32(i, r);
        }
        if !finite {
            for (((&r, &i), m), p) in re.iter().zip(im).zip(mag.iter_mut()).zip(phase.iter_mut()) {
                if !(r.is_finite() && i.is_finite()) {
                    *m = r.hypot(i);
                    *p = i.atan2(r);
                }
            }
        }
    }
}

dispatch! {
    /// `(sin p, cos p)` of each value, each rounded once to f32 from [`sin_cos_f64`] (the
    /// correctly rounded values but for ~1e-15 of boundaries; libm's sincosf is within an ulp
    /// of them), vectorised, where every |p| is below [`SIN_FAST_LIMIT`]; else libm's per value.
    pub fn sin_cos_f32(phase: &[f32], sin: &mut [f32], cos: &mut [f32]) {
        let mut below = true;
        for &p in phase {
            below &= p.abs() < SIN_FAST_LIMIT;
        }
        if below {
            for ((&p, s), c) in phase.iter().zip(sin.iter_mut()).zip(cos.iter_mut()) {
                let (sd, cd) = sin_cos_f64(p as f64);
                // sin(±0) = ±0 (the reduction gives +0 for both).
                (*s, *c) = (if p == 0.0 { p } else { sd as f32 }, cd as f32);
            }
        } else {
            for ((&p, s), c) in phase.iter().zip(sin.iter_mut()).zip(cos.iter_mut()) {
                (*s, *c) = p.sin_cos();
            }
        }
    }
}

dispatch! {
    /// One frame's forward DFT in f64, summed over the taps in order: `re[k] += v_t·cos[t][k]`,
    /// `im[k] −= v_t·sin[t][k]` for each tap `t` of `frame` (tables `[taps][bins]`, `bins =
    /// re.len()`), the bins in vector lanes.
    pub fn dft_by_tap(frame: &[f64], cos: &[f64], sin: &[f64], re: &mut [f64], im: &mut [f64]) {
        let bins = re.len();
        for ((&v, c), s) in frame.iter().zip(cos.chunks_exact(bins)).zip(sin.chunks_exact(bins)) {
            for (((r, i), &c), &s) in re.iter_mut().zip(im.iter_mut()).zip(c).zip(s) {
                *r += v * c;
                *i -= v * s;
            }
        }
    }
}

dispatch! {
    /// One frame of a one-sided inverse DFT in f64 (unscaled): `acc[t] = re[0] + re[N/2]·cos_{N/2}[t]
    /// + Σ_{k=1}^{N/2−1} 2·(re[k]·cos_k[t] − im[k]·sin_k[t])`, the interior bins added in order
    /// (tables `[bins][taps]`, `taps = acc.len()`), the taps in vector lanes.
    pub fn idft_by_bin(re: &[f64], im: &[f64], cos: &[f64], sin: &[f64], acc: &mut [f64]) {
        let taps = acc.len();
        let half = re.len() - 1;
        for (a, &c) in acc.iter_mut().zip(&cos[half * taps..(half + 1) * taps]) {
            *a = re[0] + re[half] * c;
        }
        for k in 1..half {
            let (c, s) = (&cos[k * taps..(k + 1) * taps], &sin[k * taps..(k + 1) * taps]);
            let (rk, ik) = (re[k], im[k]);
            for ((a, &c), &s) in acc.iter_mut().zip(c).zip(s) {
                *a += 2.0 * (rk * c - ik * s);
            }
        }
    }
}

/// `e^x` in f64 for |x| ≤ 700, within an ulp or two of the exact value: x = n·ln2 + r with
/// |r| ≤ ln2/2 (ln 2 in two parts, [`LN2_HI_F64`] and [`LN2_LO_F64`]),
/// the Taylor series of e^r to r¹³ (truncation below 5e-18), scaled by 2ⁿ through the exponent
/// bits. Branch-free. Used where an f32 result must be correctly rounded: evaluated this
/// closely, the f32 rounding of the f64 value is the exact value's except within ~1e-15 of a
/// rounding boundary (a few values in 10⁹).
#[inline(always)]
pub fn exp_f64(x: f64) -> f64 {
    let shifted = x * std::f64::consts::LOG2_E + ROUND_MAGIC_F64;
    let n = shifted - ROUND_MAGIC_F64;
    let r = (x - n * LN2_HI_F64) - n * LN2_LO_F64;
    // 1/k! for k = 13 down to 2.
    const INV_FACT: [f64; 12] = [
        1.0 / 6_227_020_800.0,
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
    ];
    let mut p = INV_FACT[0];
    for &c in &INV_FACT[1..] {
        p = p * r + c;
    }
    let e = 1.0 + (r + r * r * p);
    // bits(shifted) = bits(1.5·2⁵²) + n: the biased exponent n + 1023 shifted into place.
    let scale = f64::from_bits((shifted.to_bits().wrapping_sub(ROUND_MAGIC_F64.to_bits()).wrapping_add(1023)) << 52);
    e * scale
}

/// The logistic sigmoid `1/(1 + e^−x)` of an f32, correctly rounded to f32 (evaluated in f64
/// through [`exp_f64`]; see there for the rare exception). Arguments past ±200 are clamped
/// there, where the result is 0 or 1 in f32 either way; NaN stays NaN.
#[inline(always)]
pub fn sigmoid_f32_exact(x: f32) -> f32 {
    let x = (x as f64).clamp(-200.0, 200.0);
    (1.0 / (1.0 + exp_f64(-x))) as f32
}

/// `tanh` of an f32, correctly rounded to f32 (evaluated in f64 as for [`sigmoid_f32_exact`]):
/// `1 − 2/(e^{2|x|} + 1)` with x's sign, and below |x| = 1/32, where that form cancels, the odd
/// series to x¹¹ (truncation below 1e-19 of the result). |x| is clamped at 20, past which tanh
/// is ±1 in f32; NaN stays NaN.
#[inline(always)]
pub fn tanh_f32_exact(x: f32) -> f32 {
    let a = (x as f64).abs().min(20.0);
    let big = 1.0 - 2.0 / (exp_f64(2.0 * a) + 1.0);
    let z = a * a;
    // tanh a = a − a³/3 + 2a⁵/15 − 17a⁷/315 + 62a⁹/2835 − 1382a¹¹/155925.
    let small = a + a * z * (-1.0 / 3.0 + z * (2.0 / 15.0 + z * (-17.0 / 315.0 + z * (62.0 / 2835.0 + z * (-1382.0 / 155_925.0)))));
    let t = if a < 1.0 / 32.0 { small } else { big };
    let t = if x.is_nan() { f64::NAN } else { t };
    (t as f32).copysign(x)
}

/// The uniform double `uniform_real_distribution<double>` makes of two 32-bit words (libstdc++
/// and PyTorch's CPU generator): the low 53 bits of `(a << 32) | b`, times 2⁻⁵³. Formed from
/// two exact conversions so that it vectorises without AVX-512 DQ.
#[inline(always)]
pub fn uniform_f64_of_words(a: u32, b: u32) -> f64 {
    let hi = (a & 0x1f_ffff) as i32 as f64 * 4_294_967_296.0;
    let lo = (b >> 1) as i32 as f64 * 2.0 + (b & 1) as i32 as f64;
    (hi + lo) * (1.0 / 9_007_199_254_740_992.0)
}

/// One Box–Muller pair `(r·cos θ, r·sin θ)` of `normal_distribution<double>` as PyTorch's CPU
/// generator draws it from four words: u1 (θ = 2π·u1) from the first two, u2
/// (r = √(−2·ln(1 − u2))) from the last two. `1 − u2` is exact (u2 is a multiple of 2⁻⁵³
/// below 1), so ln of it is `log1p(−u2)`.
#[inline(always)]
pub fn box_muller_f64(w: [u32; 4]) -> (f64, f64) {
    let u1 = uniform_f64_of_words(w[0], w[1]);
    let u2 = uniform_f64_of_words(w[2], w[3]);
    // `+ 0.0` turns the −0 of u2 = 0 into +0, as log1p(−0) = −0 gives after the product.
    let r = (-2.0 * ln_f64(1.0 - u2) + 0.0).sqrt();
    let (s, c) = sin_cos_f64(2.0 * std::f64::consts::PI * u1);
    (r * c, r * s)
}

dispatch! {
    /// Rows `first..first + out.len() / c` of a linear interpolation along the rows
    /// (`align_corners=False`), as PyTorch's CPU kernel computes them in f32:
    /// src = max(ratio·(t + 0.5) − 0.5, 0), i0 = ⌊src⌋, i1 = i0 + 1 unless i0 is the last row,
    /// weights (1 − λ, λ) with λ = src − i0, and `t0·w0 + t1·w1` contracted as x86 builds of
    /// PyTorch contract it, into fma(t0, w0, t1·w1). Bit-exactness matters: Kokoro's source
    /// interpolates phases of ~10⁴ radians, where one ulp is a visible change in the sine. Here
    /// the fma is an instruction (libm's software `fmaf` where the CPU has none).
    pub fn interpolate_rows(spec: &crate::spec::InterpolateSpec, x: &[f32], first: usize, out: &mut [f32]) {
        let crate::spec::InterpolateSpec { n_in, n_out, c, .. } = *spec;
        for (i, row) in out.chunks_exact_mut(c).enumerate() {
            let r = first + i;
            let (b, t) = (r / n_out, r % n_out);
            let (i0, i1, l0, l1) = spec.taps(t);
            let a = &x[(b * n_in + i0) * c..(b * n_in + i0 + 1) * c];
            let bb = &x[(b * n_in + i1) * c..(b * n_in + i1 + 1) * c];
            for ((o, &p), &q) in row.iter_mut().zip(a).zip(bb) {
                *o = p.mul_add(l0, q * l1);
            }
        }
    }
}

dispatch! {
    /// Channel `channel` of [`interpolate_rows`]' output rows `first..first + out.len()` of item
    /// 0, each value as that kernel computes it (the fma an instruction here too).
    ///
    /// Where every row index and offset fits 24 bits, the taps are formed in 32-bit integers
    /// (the same values: each integer is exact in f32 either way) 16 rows at a time, and where
    /// the 16 rows read the same two input rows (an upsample: runs of 300 in Kokoro's source)
    /// those two values are loaded once, so the block is pure vector arithmetic; the scalar form
    /// took ~20 cycles a value.
    pub fn interpolate_channel(spec: &crate::spec::InterpolateSpec, x: &[f32], channel: usize, first: usize, out: &mut [f32]) {
        let crate::spec::InterpolateSpec { n_in, c, ratio, .. } = *spec;
        assert!(n_in > 0 && channel < c && x.len() >= n_in * c, "interpolate_channel: operands");
        const EXACT: usize = 1 << 24;
        const LANES: usize = 16;
        if first + out.len() <= EXACT && n_in * c <= EXACT {
            let last = (n_in - 1) as f32;
            let at = |row: u32| x[row as usize * c + channel];
            let mut t0 = first;
            for block in out.chunks_mut(LANES) {
                let (mut i0, mut l1) = ([0u32; LANES], [0.0f32; LANES]);
                for j in 0..LANES {
                    let src = (ratio * ((t0 + j) as u32 as f32 + 0.5) - 0.5).max(0.0);
                    // ⌊min(src, last)⌋ is min(⌊src⌋, last), and it lies in [0, last].
                    // SAFETY: finite, non-negative and below 2^24 (max(NaN, 0) is 0).
                    i0[j] = unsafe { src.min(last).to_int_unchecked::<u32>() };
                    l1[j] = src - i0[j] as f32;
                }
                let n = block.len();
                if i0[0] == i0[n - 1] {
                    // i0 grows with the row: all n rows read the same two input rows.
                    let (a, b) = (at(i0[0]), at((i0[0] + 1).min(n_in as u32 - 1)));
                    for (o, &l) in block.iter_mut().zip(&l1) {
                        *o = a.mul_add(1.0 - l, b * l);
                    }
                } else {
                    for ((o, &r), &l) in block.iter_mut().zip(&i0).zip(&l1) {
                        *o = at(r).mul_add(1.0 - l, at((r + 1).min(n_in as u32 - 1)) * l);
                    }
                }
                t0 += LANES;
            }
        } else {
            for (i, o) in out.iter_mut().enumerate() {
                let (i0, i1, l0, l1) = spec.taps(first + i);
                *o = x[i0 * c + channel].mul_add(l0, x[i1 * c + channel] * l1);
            }
        }
    }
}

dispatch! {
    /// [`box_muller_f64`] on each four words of `words`, both values rounded to f32 into `out`
    /// (two per four words; `out.len() == words.len() / 2`).
    pub fn box_muller_words(words: &[u32], out: &mut [f32]) {
        for (w, o) in words.chunks_exact(4).zip(out.chunks_exact_mut(2)) {
            let (c, s) = box_muller_f64([w[0], w[1], w[2], w[3]]);
            o[0] = c as f32;
            o[1] = s as f32;
        }
    }
}

/// Past this magnitude [`sin2_f32_arith`]'s reduction by π/2 is no longer exact
/// (`j·PIO2_B` needs |j| < 2^13); callers send such arguments to [`sin_f32`] instead.
pub const SIN_F32_ARITH_LIMIT: f32 = 8_192.0;

/// `t = j·π/2 + r`, |r| ≤ π/4, in f32 arithmetic alone for |t| < [`SIN_F32_ARITH_LIMIT`]:
/// `r` and the quadrant `j` in its low bits. π/2 is taken in four parts (Cody–Waite: the
/// first two products exact, the last two fused).
#[inline(always)]
fn reduce_by_half_pi(t: f32) -> (f32, u32) {
    const TWO_OVER_PI: f32 = std::f32::consts::FRAC_2_PI;
    // π/2 = A + B + C + D (to 1e-23): A has 8 significant bits and B 11, so j·A and j·B are
    // exact for the quadrants j below the limit, and near a zero of the sine (r small) both
    // subtractions are exact too (Sterbenz); C and D go in by fused multiply-adds, one rounding
    // each. Without D, or with C's product rounded apart, r is 2–3 ulp off there.
    const PIO2_A: f32 = 1.570_312_5;
    const PIO2_B: f32 = 4.837_513e-4;
    const PIO2_C: f32 = 7.549_79e-8;
    const PIO2_D: f32 = -1.715_124_5e-15;
    // 1.5·2^23: adding it rounds to an integer held in the low mantissa bits (two's
    // complement), which gives the quadrant without a float-to-int conversion.
    const ROUND_MAGIC_F32: f32 = 12_582_912.0;
    let jm = t * TWO_OVER_PI + ROUND_MAGIC_F32;
    let quadrant = jm.to_bits();
    let j = jm - ROUND_MAGIC_F32;
    let r = (t - j * PIO2_A) - j * PIO2_B;
    ((-j).mul_add(PIO2_D, (-j).mul_add(PIO2_C, r)), quadrant)
}

/// Cephes' minimax polynomial for `sin r` on |r| ≤ π/4 (`z = r²`), by fused multiply-adds.
#[inline(always)]
fn sin_poly(r: f32, z: f32) -> f32 {
    let p = z.mul_add(-1.951_529_6e-4, 8.332_161e-3).mul_add(z, -1.666_665_5e-1);
    (r * z).mul_add(p, r)
}

/// `sin²(t)` as the f32 backend's Snake forms it, below [`SIN_F32_ARITH_LIMIT`], in f32
/// arithmetic alone: `t` reduced by π/2, then one polynomial, `s = sin r`: sin²t is `s²` in the
/// even quadrants and cos²r = `1 − s²` in the odd ones (|r| ≤ π/4, so `s² ≤ ½` and the
/// subtraction loses nothing). Within 3.5 ulp of the exact value (tested), as close as a sine
/// to 1.5 ulp squared, with no cosine polynomial, sign or select of the two: a third less
/// arithmetic on every value each AdaIN + Snake pass of the generator reads. 16 f32 lanes
/// against [`sin_f32`]'s 8 f64 ones, with no conversions.
#[inline(always)]
pub fn sin2_f32_arith(t: f32) -> f32 {
    let (r, quadrant) = reduce_by_half_pi(t);
    let s = sin_poly(r, r * r);
    let s2 = s * s;
    if quadrant & 1 == 0 {
        s2
    } else {
        1.0 - s2
    }
}

/// Whether every `|α·x|` is below `limit` (false if one is NaN). A plain AND of comparisons,
/// so that it vectorises: a running NaN-aware maximum compiled to a scalar loop that took most
/// of Snake's time.
#[inline(always)]
fn all_below(x: &[f32], alpha: &[f32], limit: f32) -> bool {
    let mut below = true;
    for (&v, &a) in x.iter().zip(alpha) {
        below &= (a * v).abs() < limit;
    }
    below
}

/// Past this magnitude [`sin2_f32`]'s reduction by π is no longer exact (`k·PI_B` needs
/// |k| < 2^13); rows with a larger argument take [`snake_row`]'s path instead.
pub const SIN2_F32_LIMIT: f32 = 16_384.0;

/// `sin²(θ)` in f32 arithmetic alone, for the reduced-precision backends' Snake: θ reduced
/// modulo π (the period of sin²) with π in three parts (Cody–Waite; the first two products exact
/// for |θ| < [`SIN2_F32_LIMIT`]), `sin r` on |r| ≤ π/2 by its Taylor polynomial to r¹¹
/// (truncation below 6e-8), squared: within 4e-7 of the exact value (the f32 roundings of `r`,
/// of the polynomial and of the square; tested), against
/// [`sin_f32`]'s correctly rounded sine through f64 at about a third of the cost: 16 f32
/// lanes instead of 8 f64 ones, no conversions.
#[inline(always)]
pub fn sin2_f32(t: f32) -> f32 {
    const INV_PI: f32 = std::f32::consts::FRAC_1_PI;
    const PI_A: f32 = 3.140_625;
    const PI_B: f32 = 9.675_026e-4;
    const PI_C: f32 = 1.509_958e-7;
    let k = (t * INV_PI).round_ties_even();
    let r = ((t - k * PI_A) - k * PI_B) - k * PI_C;
    let z = r * r;
    let s = r + r * z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (1.0 / 362_880.0 + z * (-1.0 / 39_916_800.0)))));
    s * s
}

dispatch! {
    /// Snake as [`snake_row`] computes it, with `sin²` from [`sin2_f32`] (f32 arithmetic): for
    /// the backends whose other arithmetic is already coarser than its 4e-7. A row with an
    /// argument past [`SIN2_F32_LIMIT`] (or NaN) takes [`snake_row`].
    pub fn snake_row_f32(x: &mut [f32], alpha: &[f32], inv_alpha: &[f32]) {
        if all_below(x, alpha, SIN2_F32_LIMIT) {
            for ((v, &a), &ia) in x.iter_mut().zip(alpha).zip(inv_alpha) {
                *v += ia * sin2_f32(a * *v);
            }
        } else {
            snake_row(x, alpha, inv_alpha);
        }
    }
}

dispatch! {
    /// Snake in place on one channels-last row: `x + sin²(α·x)/α`, with `inv_alpha = 1/α`
    /// computed once by the caller (the same f32 value PyTorch divides by). Vectorised through
    /// [`sin2_f32_arith`] (the squared sine to 3.5 ulp in f32 arithmetic); a row with
    /// an argument past [`SIN_F32_ARITH_LIMIT`] takes [`sin_f32`] (through f64), and one past
    /// [`SIN_FAST_LIMIT`] (or with a NaN) libm's sinf.
    pub fn snake_row(x: &mut [f32], alpha: &[f32], inv_alpha: &[f32]) {
        if all_below(x, alpha, SIN_F32_ARITH_LIMIT) {
            for ((v, &a), &ia) in x.iter_mut().zip(alpha).zip(inv_alpha) {
                *v += ia * sin2_f32_arith(a * *v);
            }
        } else if all_below(x, alpha, SIN_FAST_LIMIT) {
            for ((v, &a), &ia) in x.iter_mut().zip(alpha).zip(inv_alpha) {
                let s = sin_f32(a * *v);
                *v += ia * (s * s);
            }
        } else {
            for ((v, &a), &ia) in x.iter_mut().zip(alpha).zip(inv_alpha) {
                let s = (a * *v).sin();
                *v += ia * (s * s);
            }
        }
    }
}

/// IEEE f16 values widened exactly to f32 (`dst[i] = src[i]` for `i < min(len)`): 16 at a time
/// with AVX-512's `vcvtph2ps` where the CPU has it, inline, else the `half` crate's conversion
/// (F16C where present). The f16-stored weights are widened per op, and the crate's call per 8
/// values through the stack cost ~3 % of a short Kokoro forward.
pub fn widen_f16(src: &[half::f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512 F; the kernel reads `n` halves and writes `n` floats.
        unsafe { widen_f16_avx512(src, dst) };
        return;
    }
    half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, dst);
}

/// # Safety
/// AVX-512 F present; `src` and `dst` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn widen_f16_avx512(src: &[half::f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm512_cvtph_ps, _mm512_storeu_ps};
    let whole = src.len() / 16 * 16;
    for i in (0..whole).step_by(16) {
        // SAFETY: 16 halves (32 bytes) from `i` and 16 floats from `i` lie inside the slices.
        unsafe {
            let h = _mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i);
            _mm512_storeu_ps(dst.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
        }
    }
    half::slice::HalfFloatSliceExt::convert_to_f32_slice(&src[whole..], &mut dst[whole..]);
}

dispatch! {
    /// `sums[j] += rows[r·c + j]` in f64 for every row of `rows` (`c = sums.len()`): instance
    /// norm's per-channel sums. Each channel's sum runs over the rows in order whatever the
    /// vector width, so every build adds the same values the same way.
    pub fn add_rows_f64(sums: &mut [f64], rows: &[f32]) {
        for row in rows.chunks_exact(sums.len()) {
            for (s, &v) in sums.iter_mut().zip(row) {
                *s += v as f64;
            }
        }
    }
}

dispatch! {
    /// `sums[j] += (rows[r·c + j] − mean[j])²` in f64 for every row (`c = sums.len()`): instance
    /// norm's sums of squared deviations, in row order per channel as [`add_rows_f64`].
    pub fn add_squared_deviations_f64(sums: &mut [f64], rows: &[f32], mean: &[f64]) {
        for row in rows.chunks_exact(sums.len()) {
            for ((s, &v), &m) in sums.iter_mut().zip(row).zip(mean) {
                let d = v as f64 - m;
                *s += d * d;
            }
        }
    }
}

/// `out = snake(norm(x))` in one pass over the row while every `|α·v|` is below `limit`
/// (`sin2` the Snake's `sin²` there), with the operations and order of [`normalize_row`] then
/// the Snake row function, so the same bits; `false` (the row left half-written) where an
/// argument is past `limit` or NaN, for the caller to run the two passes instead. Three passes
/// over each row (normalise, check the range, Snake) were ~11 % of a long int8 Kokoro forward
/// on a Xeon with AMX.
#[inline(always)]
fn normalize_snake_in_range(
    out: &mut [f32],
    x: &[f32],
    (mean, scale, shift): (&[f32], &[f32], &[f32]),
    (alpha, inv_alpha): (&[f32], &[f32]),
    limit: f32,
    sin2: impl Fn(f32) -> f32,
) -> bool {
    let c = out.len().min(x.len()).min(mean.len()).min(scale.len()).min(shift.len()).min(alpha.len()).min(inv_alpha.len());
    let (out, x, mean, scale, shift, alpha, inv_alpha) =
        (&mut out[..c], &x[..c], &mean[..c], &scale[..c], &shift[..c], &alpha[..c], &inv_alpha[..c]);
    let mut below = true;
    for i in 0..c {
        let v = (x[i] - mean[i]) * scale[i] + shift[i];
        let t = alpha[i] * v;
        below &= t.abs() < limit;
        out[i] = v + inv_alpha[i] * sin2(t);
    }
    below
}

dispatch! {
    /// [`normalize_row`] (`norm = (mean, scale, shift)`) then [`snake_row_f32`], in one pass
    /// below [`SIN2_F32_LIMIT`] ([`normalize_snake_in_range`]): the reduced-precision
    /// backends' fused AdaIN + Snake, on every row their convolutions read.
    pub fn normalize_snake_row_f32(out: &mut [f32], x: &[f32], norm: (&[f32], &[f32], &[f32]), alpha: &[f32], inv_alpha: &[f32]) {
        if !normalize_snake_in_range(out, x, norm, (alpha, inv_alpha), SIN2_F32_LIMIT, sin2_f32) {
            normalize_row(out, x, norm.0, norm.1, norm.2);
            snake_row_f32(out, alpha, inv_alpha);
        }
    }
}

dispatch! {
    /// [`normalize_row`] then [`snake_row`], in one pass below [`SIN_F32_ARITH_LIMIT`]
    /// ([`normalize_snake_in_range`] with [`sin2_f32_arith`]): the f32 backend's fused AdaIN +
    /// Snake, on every row its FFT convolution reads.
    pub fn normalize_snake_row(out: &mut [f32], x: &[f32], norm: (&[f32], &[f32], &[f32]), alpha: &[f32], inv_alpha: &[f32]) {
        if !normalize_snake_in_range(out, x, norm, (alpha, inv_alpha), SIN_F32_ARITH_LIMIT, sin2_f32_arith) {
            normalize_row(out, x, norm.0, norm.1, norm.2);
            snake_row(out, alpha, inv_alpha);
        }
    }
}

dispatch! {
    /// `out = (x − mean)·scale + shift` per channel over one channels-last row: instance norm's
    /// output with normalisation, affine and style folded into `scale` and `shift` (two rounded
    /// operations, no fused multiply-add, the same on every build).
    pub fn normalize_row(out: &mut [f32], x: &[f32], mean: &[f32], scale: &[f32], shift: &[f32]) {
        for ((((o, &x), &m), &a), &d) in out.iter_mut().zip(x).zip(mean).zip(scale).zip(shift) {
            *o = (x - m) * a + d;
        }
    }
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
    /// `x = sin(x)` in place: [`sin_f32`] (through f64, vectorised; libm's result or one ulp
    /// from it) where every |x| of the slice is below [`SIN_FAST_LIMIT`], else libm's sinf per
    /// value (a NaN or infinity among them included). Kokoro's harmonic source takes the sine of
    /// phases that reach ~10⁶ on a long utterance, where libm's sinf, one value at a time, was
    /// most of the source's time.
    pub fn map_sin(x: &mut [f32]) {
        let mut below = true;
        for &v in x.iter() {
            below &= v.abs() < SIN_FAST_LIMIT;
        }
        if below {
            for v in x.iter_mut() { *v = sin_f32(*v); }
        } else {
            for v in x.iter_mut() { *v = v.sin(); }
        }
    }
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

/// The sum of 16 lanes by halving (pairs 8 apart, then 4, 2, 1), as [`sum`] reduces.
#[inline(always)]
fn reduce16(mut acc: [f32; 16]) -> f32 {
    let mut half = 8;
    while half > 0 {
        for i in 0..half {
            acc[i] += acc[i + half];
        }
        half /= 2;
    }
    acc[0]
}

dispatch! {
    /// `out += W·v` for a row-major `W [out.len(), v.len()]`: the LSTM's recurrent product.
    /// Four rows at a time, so each loaded chunk of `v` serves four rows, with 16 lanes per row
    /// reduced by [`reduce16`].
    pub fn gemv_rows_acc(w: &[f32], v: &[f32], out: &mut [f32]) {
        let k = v.len();
        if k == 0 {
            return;
        }
        let body = k / 16 * 16;
        let (v16, v_tail) = v.split_at(body);
        let mut quads = out.chunks_exact_mut(4);
        let mut rows = w.chunks_exact(k);
        for o in &mut quads {
            let (Some(w0), Some(w1), Some(w2), Some(w3)) = (rows.next(), rows.next(), rows.next(), rows.next()) else { return };
            let (mut a0, mut a1, mut a2, mut a3) = ([0.0f32; 16], [0.0f32; 16], [0.0f32; 16], [0.0f32; 16]);
            let chunks = w0[..body].chunks_exact(16).zip(w1[..body].chunks_exact(16)).zip(w2[..body].chunks_exact(16).zip(w3[..body].chunks_exact(16)));
            for (((c0, c1), (c2, c3)), vc) in chunks.zip(v16.chunks_exact(16)) {
                for i in 0..16 {
                    a0[i] += c0[i] * vc[i];
                    a1[i] += c1[i] * vc[i];
                    a2[i] += c2[i] * vc[i];
                    a3[i] += c3[i] * vc[i];
                }
            }
            let mut s = [reduce16(a0), reduce16(a1), reduce16(a2), reduce16(a3)];
            for (j, &vj) in v_tail.iter().enumerate() {
                s[0] += w0[body + j] * vj;
                s[1] += w1[body + j] * vj;
                s[2] += w2[body + j] * vj;
                s[3] += w3[body + j] * vj;
            }
            for (oi, si) in o.iter_mut().zip(s) {
                *oi += si;
            }
        }
        for (o, wr) in quads.into_remainder().iter_mut().zip(rows) {
            let mut acc = [0.0f32; 16];
            for (c, vc) in wr[..body].chunks_exact(16).zip(v16.chunks_exact(16)) {
                for i in 0..16 {
                    acc[i] += c[i] * vc[i];
                }
            }
            let mut s = reduce16(acc);
            for (j, &vj) in v_tail.iter().enumerate() {
                s += wr[body + j] * vj;
            }
            *o += s;
        }
    }
}

dispatch! {
    /// One LSTM cell update from the pre-activation `gates [i | f | g | o]` (each `h.len()`
    /// wide): `c = σ(f)·c + σ(i)·tanh(g)`, `h = σ(o)·tanh(c)`, the products and sum in f32 and
    /// σ and tanh correctly rounded ([`sigmoid_f32_exact`], [`tanh_f32_exact`]: f64 inside,
    /// vectorised). Not the fast f32 approximations: their 1e-7 errors, compounded over a
    /// thousand steps of Kokoro's shared BiLSTM, moved its N curve past its golden bound. libm's
    /// `expf`/`tanhf` one value at a time were most of a step's time.
    pub fn lstm_cell(gates: &[f32], c: &mut [f32], h: &mut [f32]) {
        let n = h.len();
        let (gi, rest) = gates.split_at(n);
        let (gf, rest) = rest.split_at(n);
        let (gg, go) = rest.split_at(n);
        let go = &go[..n];
        for (((((hj, cj), &i), &f), &g), &o) in h.iter_mut().zip(c.iter_mut()).zip(gi).zip(gf).zip(gg).zip(go) {
            let cn = sigmoid_f32_exact(f) * *cj + sigmoid_f32_exact(i) * tanh_f32_exact(g);
            *cj = cn;
            *hj = sigmoid_f32_exact(o) * tanh_f32_exact(cn);
        }
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
    fn sin_matches_libm_to_one_ulp() {
        // Dense grid over the arguments Snake sees (|α·x| up to hundreds) and a sparse one out
        // to the fast limit; the f64 evaluation should round like libm's f64 sine.
        let mut worst_ulps = 0u32;
        let mut check = |x: f32| {
            let got = sin_f32(x);
            let want = (x as f64).sin() as f32;
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32;
            if got != want {
                worst_ulps = worst_ulps.max(ulps);
            }
        };
        let mut x = -400.0f32;
        while x < 400.0 {
            check(x);
            x += 0.000_913;
        }
        let mut x = 400.0f32;
        while x < SIN_FAST_LIMIT {
            check(x);
            check(-x);
            x *= 1.000_37;
        }
        for x in [0.0f32, -0.0, 1e-30, -1e-20, std::f32::consts::PI, std::f32::consts::FRAC_PI_2] {
            check(x);
        }
        assert!(worst_ulps <= 1, "sin_f32 is {worst_ulps} ulp from libm");
        assert!(sin_f32(f32::NAN).is_nan() && sin_f32(f32::INFINITY).is_nan());
    }

    /// f64 values apart, in ulps (their bit patterns' distance; +0 and −0 are 0 apart).
    fn ulps_f64(a: f64, b: f64) -> u64 {
        if a == b {
            return 0;
        }
        if a.is_sign_negative() != b.is_sign_negative() {
            return u64::MAX;
        }
        a.to_bits().abs_diff(b.to_bits())
    }

    /// 64-bit words of a xorshift stream, as 32-bit halves.
    fn words(count: usize, seed: u64) -> Vec<u32> {
        let mut s = seed | 1;
        (0..count)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 16) as u32
            })
            .collect()
    }

    #[test]
    fn ln_f64_is_within_one_ulp_of_libm() {
        let mut args: Vec<f64> = words(400_000, 3).chunks_exact(2).map(|w| 1.0 - uniform_f64_of_words(w[0], w[1])).collect();
        // The ends of the domain Box–Muller gives it, powers of two, and both sides of the
        // √2 switch of the reduction.
        args.extend([1.0, 1.0 - f64::EPSILON / 2.0, 2f64.powi(-53), 0.5, 0.25, 3.0e-9]);
        let sqrt2_half = std::f64::consts::FRAC_1_SQRT_2;
        for d in -4i64..=4 {
            args.push(f64::from_bits((sqrt2_half.to_bits() as i64 + d) as u64));
            args.push(f64::from_bits((std::f64::consts::SQRT_2.to_bits() as i64 + d) as u64) / 4.0);
        }
        let worst = args.iter().map(|&y| ulps_f64(ln_f64(y), y.ln())).max().unwrap_or(0);
        assert!(worst <= 1, "ln_f64 is {worst} ulp from libm");
        // The wrong variant: the series cut after s⁸ is visibly off.
        let y = 0.72f64;
        let f = y - 1.0;
        let s = f / (2.0 + f);
        let short = 2.0 * s + 2.0 * s.powi(3) / 3.0 + 2.0 * s.powi(5) / 5.0 + 2.0 * s.powi(7) / 7.0;
        assert!(ulps_f64(short, y.ln()) > 4, "the check must tell a short series apart");
    }

    #[test]
    fn sin_cos_f64_is_within_one_ulp_of_libm() {
        let mut args: Vec<f64> =
            words(400_000, 5).chunks_exact(2).map(|w| 2.0 * std::f64::consts::PI * uniform_f64_of_words(w[0], w[1])).collect();
        // Around each quadrant boundary and each multiple of π/2, where the reduction switches
        // polynomials or cancels.
        for q in 0..=4 {
            for centre in [q as f64 * std::f64::consts::FRAC_PI_2, (q as f64 + 0.5) * std::f64::consts::FRAC_PI_2] {
                for d in -3i64..=3 {
                    args.push(f64::from_bits((centre.to_bits() as i64 + d) as u64).max(0.0));
                }
            }
        }
        for &t in &args {
            let (s, c) = sin_cos_f64(t);
            // One ulp, or the reduction constant's 1e-25 near a zero of either.
            let close = |got: f64, want: f64| ulps_f64(got, want) <= 1 || (got - want).abs() <= 1e-25;
            assert!(close(s, t.sin()) && close(c, t.cos()), "θ = {t:e}: ({s:e}, {c:e}) vs libm ({:e}, {:e})", t.sin(), t.cos());
        }
    }

    /// One channel of rows, as the source takes its upsampled phases, is that column of
    /// [`interpolate_rows`] bit for bit: up and down, clamped at the ends, one input row, and
    /// on both sides of the 24-bit limit of the integer taps.
    #[test]
    fn interpolate_channel_is_a_column_of_interpolate_rows() {
        use crate::spec::InterpolateSpec;
        let cases = [
            (2600usize, 9usize, 300.0f64, 0usize, 5000usize),
            (2600, 9, 300.0, 779_000, 1000),
            (780_000, 9, 1.0 / 300.0, 0, 2600),
            (7, 3, 2.5, 0, 17),
            (1, 2, 4.0, 0, 4),
            (1 << 22, 2, 8.0, (1 << 24) - 150, 100),
            (1 << 22, 2, 8.0, (1 << 24) - 50, 100),
        ];
        let mut fused_matters = false;
        for (n_in, c, scale, first, rows) in cases {
            let spec = InterpolateSpec::by_scale(1, n_in, c, scale);
            let x: Vec<f32> = (0..n_in * c).map(|i| (i as f32 * 0.618_034).sin() * 3.0e4 + i as f32 * 1.7).collect();
            let mut all = vec![0.0f32; rows * c];
            interpolate_rows(&spec, &x, first, &mut all);
            for channel in 0..c {
                let mut got = vec![0.0f32; rows];
                interpolate_channel(&spec, &x, channel, first, &mut got);
                for (r, g) in got.iter().enumerate() {
                    let want = all[r * c + channel];
                    assert_eq!(g.to_bits(), want.to_bits(), "{n_in}×{c} ×{scale}, row {}, channel {channel}: {g} vs {want}", first + r);
                    // The wrong variant, two roundings instead of the fma, differs somewhere.
                    let (i0, i1, l0, l1) = spec.taps(first + r);
                    fused_matters |= (x[i0 * c + channel] * l0 + x[i1 * c + channel] * l1).to_bits() != want.to_bits();
                }
            }
        }
        assert!(fused_matters, "the check must tell an unfused interpolation apart");
    }

    /// Angles and magnitudes for every quadrant, near the axes and the diagonals, tiny and
    /// huge: the magnitude is libm's `hypotf` bit for bit; the angle within an ulp of libm's
    /// `atan2f` and the f64 angle's rounding but for a rare boundary case; signed zeros,
    /// infinities and NaNs as libm has them.
    #[test]
    fn polar_is_libms_hypot_and_the_rounded_angle() {
        let w = words(400_000, 21);
        let mut re: Vec<f32> = w.iter().step_by(2).map(|&v| f32::from_bits(v & 0x8fff_ffff | 0x3000_0000)).collect();
        let mut im: Vec<f32> = w.iter().skip(1).step_by(2).map(|&v| f32::from_bits(v & 0x8fff_ffff | 0x3000_0000)).collect();
        let specials = [0.0f32, -0.0, 1.0, -1.0, 1e-30, -1e-30, 3e30, -3e30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 2.414_213_6, 0.66];
        for &a in &specials {
            for &b in &specials {
                re.push(a);
                im.push(b);
            }
        }
        // Near the diagonals and the reduction's switch points, where the reduced argument changes form.
        for i in 0..2000 {
            let x = 1.0 + i as f32 * 1e-4;
            re.extend([x, -x, x, 0.66 * x, 2.414_213_6 * x]);
            im.extend([x - 1e-3, x, -1.0, 1.0, 1.0]);
        }
        let (mut mag, mut phase) = (vec![0.0f32; re.len()], vec![0.0f32; re.len()]);
        polar_f32(&re, &im, &mut mag, &mut phase);
        let mut off_f64 = 0usize;
        for i in 0..re.len() {
            let (r, m) = (re[i], im[i]);
            let (hm, am) = (r.hypot(m), m.atan2(r));
            assert!(
                mag[i].to_bits() == hm.to_bits() || (mag[i].is_nan() && hm.is_nan()),
                "hypot({r:e}, {m:e}) = {:e}, libm {hm:e}",
                mag[i]
            );
            if !(r.is_finite() && m.is_finite()) || r == 0.0 || m == 0.0 {
                assert!(
                    phase[i].to_bits() == am.to_bits() || (phase[i].is_nan() && am.is_nan()),
                    "atan2({m:e}, {r:e}) = {:e}, libm {am:e}",
                    phase[i]
                );
                continue;
            }
            let ulps = (phase[i].to_bits() as i64 - am.to_bits() as i64).abs();
            assert!(ulps <= 1 && phase[i].is_sign_negative() == am.is_sign_negative(), "atan2({m:e}, {r:e}) = {:e}, libm {am:e}", phase[i]);
            off_f64 += usize::from(phase[i] != (m as f64).atan2(r as f64) as f32);
        }
        assert!(off_f64 * 100_000 <= re.len(), "{off_f64} of {} angles are not the f64 angle's rounding", re.len());
        // The wrong variant: the angle's rounding in f32 arithmetic (atan of an f32 quotient) is not.
        let coarse = re
            .iter()
            .zip(&im)
            .filter(|(&r, &m)| r.is_finite() && m.is_finite() && r > 0.0 && (m / r).atan() != (m as f64).atan2(r as f64) as f32)
            .count();
        assert!(coarse > 1000, "the check must tell an f32 quotient apart ({coarse})");
    }

    /// Sines and cosines of phases in both signs up to the fast limit: the f64 values' rounding
    /// (libm's f64 sin and cos) but for a rare boundary case, within an ulp of libm's sincosf;
    /// a slice with an argument past the limit takes libm's.
    #[test]
    fn sin_cos_f32_is_the_rounded_f64_pair() {
        let w = words(300_000, 23);
        let mut phase: Vec<f32> = w.iter().map(|&v| (v as f32 / u32::MAX as f32 - 0.5) * 2.0).collect();
        phase.extend(w.iter().take(50_000).map(|&v| (v as f32 / u32::MAX as f32 - 0.5) * 1.9e6));
        phase.extend([0.0, -0.0, std::f32::consts::FRAC_PI_2, -std::f32::consts::PI, 1e-30]);
        let (mut s, mut c) = (vec![0.0f32; phase.len()], vec![0.0f32; phase.len()]);
        sin_cos_f32(&phase, &mut s, &mut c);
        let mut off = 0usize;
        for (i, &p) in phase.iter().enumerate() {
            let (ls, lc) = p.sin_cos();
            for (got, want, libm) in [(s[i], (p as f64).sin() as f32, ls), (c[i], (p as f64).cos() as f32, lc)] {
                off += usize::from(got.to_bits() != want.to_bits());
                assert!((got.to_bits() as i64 - libm.to_bits() as i64).abs() <= 1, "sincos({p:e}): {got:e} vs libm {libm:e}");
            }
        }
        assert!(off * 100_000 <= phase.len(), "{off} values are not the f64 value's rounding");
        assert_eq!(s[phase.len() - 4].to_bits(), (-0.0f32).to_bits(), "sin(−0) = −0");
        // Past the limit: libm's values for the whole slice.
        let wide = [0.5f32, 3.0e6];
        let (mut s2, mut c2) = ([0.0f32; 2], [0.0f32; 2]);
        sin_cos_f32(&wide, &mut s2, &mut c2);
        // (libm's sincosf and its separate sinf and cosf may differ by an ulp.)
        let near = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1;
        assert!(near(s2[1], 3.0e6f32.sin()) && near(c2[1], 3.0e6f32.cos()), "sincos(3e6) = ({}, {})", s2[1], c2[1]);
    }

    #[test]
    fn box_muller_words_round_to_libms_pairs_exactly() {
        // The reference: PyTorch's normal_distribution<double> pair on libm, rounded to f32.
        let reference = |w: &[u32]| {
            let u = |a: u32, b: u32| ((((a as u64) << 32) | b as u64) & ((1u64 << 53) - 1)) as f64 / 9_007_199_254_740_992.0;
            let (u1, u2) = (u(w[0], w[1]), u(w[2], w[3]));
            let r = (-2.0 * (-u2).ln_1p()).sqrt();
            let theta = 2.0 * std::f64::consts::PI * u1;
            [(r * theta.cos()) as f32, (r * theta.sin()) as f32]
        };
        let mut w = words(4 * 500_000, 9);
        // u2 = 0 (r = +0) and u2 at its largest (the longest radius), u1 at 0 and at its largest.
        w.extend([0, 0, 0, 0, 0x1f_ffff, u32::MAX, 0x1f_ffff, u32::MAX, 7, 1, 0, 1]);
        let mut got = vec![0.0f32; w.len() / 2];
        box_muller_words(&w, &mut got);
        let mut wrong = 0usize;
        for (i, (pair, q)) in got.chunks_exact(2).zip(w.chunks_exact(4)).enumerate() {
            let want = reference(q);
            assert_eq!([pair[0].to_bits(), pair[1].to_bits()], [want[0].to_bits(), want[1].to_bits()], "pair {i}: {pair:?} vs {want:?}");
            // The wrong variant: the logarithm in f32.
            let u2 = uniform_f64_of_words(q[2], q[3]);
            let r32 = (-2.0 * (1.0 - u2 as f32).ln()).sqrt() as f64;
            let (s, c) = sin_cos_f64(2.0 * std::f64::consts::PI * uniform_f64_of_words(q[0], q[1]));
            wrong += usize::from((r32 * c) as f32 != want[0] || (r32 * s) as f32 != want[1]);
        }
        assert!(wrong > 1000, "an f32 logarithm must be told apart ({wrong} pairs differ)");
    }

    #[test]
    fn exp_f64_is_within_two_ulp_of_libm() {
        let args = words(200_000, 13).into_iter().map(|w| (w as f64 / u32::MAX as f64 - 0.5) * 1_400.0);
        for x in args.chain([0.0, -0.0, 1e-300, 0.5 * std::f64::consts::LN_2, -700.0, 700.0]) {
            let (got, want) = (exp_f64(x), x.exp());
            assert!(ulps_f64(got, want) <= 2, "exp({x:e}) = {got:e}, libm {want:e}");
        }
    }

    #[test]
    fn sigmoid_and_tanh_are_correctly_rounded() {
        // f32 arguments over the LSTM gates' range and past it, plus tiny, huge and special ones.
        let mut args: Vec<f32> = words(400_000, 17).into_iter().map(|w| (w as f32 / u32::MAX as f32 - 0.5) * 40.0).collect();
        args.extend([0.0, -0.0, 1e-30, -1e-30, 1e-8, 0.031_25, -0.031_25, 0.031_249, 88.0, -88.0, 104.0, -104.0, 1e30, -1e30]);
        args.extend([f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE, f32::MAX]);
        let (mut libm_sig, mut libm_tanh) = (0usize, 0usize);
        for &x in &args {
            // The exact values to f64's precision, then rounded once (libm's f64 functions).
            let xd = x as f64;
            let sig = (1.0 / (1.0 + (-xd).exp())) as f32;
            let th = xd.tanh() as f32;
            assert_eq!(sigmoid_f32_exact(x).to_bits(), sig.to_bits(), "σ({x:e}) = {:e}, want {sig:e}", sigmoid_f32_exact(x));
            assert_eq!(tanh_f32_exact(x).to_bits(), th.to_bits(), "tanh({x:e}) = {:e}, want {th:e}", tanh_f32_exact(x));
            // f32 libm's, rounded three times (σ) or computed in f32 (tanhf), are not always.
            libm_sig += usize::from((1.0 / (1.0 + (-x).exp())).to_bits() != sig.to_bits());
            libm_tanh += usize::from(x.tanh().to_bits() != th.to_bits());
        }
        assert!(sigmoid_f32_exact(f32::NAN).is_nan() && tanh_f32_exact(f32::NAN).is_nan());
        // The wrong variant, and the reason for this kernel: libm's f32 forms miss the correctly
        // rounded value for some arguments (so the check can tell them apart).
        assert!(libm_sig > 0 && libm_tanh > 0, "f32 libm: {libm_sig} σ and {libm_tanh} tanh differ");
        // Near 0, tanh's 1 − 2/(e^{2x} + 1) form alone cancels: the series is what holds it.
        let x = 1e-12f64;
        let cancelled = (1.0 - 2.0 / (exp_f64(2.0 * x) + 1.0)) as f32;
        assert_ne!(cancelled.to_bits(), (x.tanh() as f32).to_bits(), "the check must tell the cancelling form apart");
    }

    #[test]
    fn map_sin_is_libm_to_one_ulp_on_every_argument() {
        // Slices wholly below the fast limit (a source's phases out to 9e5) and slices with one
        // argument past it, a NaN or an infinity, which take libm's sinf for every value.
        let phases: Vec<f32> = (0..5000).map(|i| i as f32 * 181.37 + (i % 7) as f32 * 0.013).collect();
        let mut with_large = phases.clone();
        with_large[17] = 3.0e6;
        let mut with_nan = phases.clone();
        with_nan[4000] = f32::NAN;
        let mut with_inf = phases.clone();
        with_inf[1] = f32::NEG_INFINITY;
        for (name, x) in [("phases", phases), ("one past the limit", with_large), ("a NaN", with_nan), ("an infinity", with_inf)] {
            let mut got = x.clone();
            map_sin(&mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let want = v.sin();
                if want.is_nan() {
                    assert!(g.is_nan(), "{name}: sin({v}) = {g}");
                    continue;
                }
                let ulps = (g.to_bits() as i64 - want.to_bits() as i64).unsigned_abs();
                assert!(ulps <= 1, "{name}: sin({v}) = {g}, libm {want}");
            }
        }
        // The wrong variant: the f32-arithmetic sine has no exact reduction this far out.
        let far = 500_000.5f32;
        assert!((sin2_f32_arith(far) - far.sin().powi(2)).abs() > 1e-3, "the check must tell a bad reduction apart");
    }

    /// Distance of `got` from the exact `want` in units of f32's ulp at `want` (the spacing of
    /// f32 values around it; at least the smallest normal's, so zeros are not divided by 0).
    fn ulps_from(got: f32, want: f64) -> f64 {
        let spacing = (want.abs() as f32).max(f32::MIN_POSITIVE);
        let ulp = (f32::from_bits(spacing.to_bits() + 1) - spacing) as f64;
        (got as f64 - want).abs() / ulp
    }

    /// The f32 backend's Snake sine squared from one polynomial: within 3.5 ulp of the exact
    /// sin² up to its limit, densely where Snake's arguments live, sparsely out to the limit,
    /// and next to the multiples of π/4 where the quadrant (and so the formula) changes. Taking
    /// `s²` in every quadrant (no `1 − s²`) is far outside, and so is a reduction by π/2 in
    /// three parts rather than four.
    #[test]
    fn sin2_f32_arith_is_within_3_5_ulp_up_to_its_limit() {
        let exact = |x: f32| (x as f64).sin().powi(2);
        let mut worst = 0.0f64;
        let mut check = |x: f32| {
            let got = sin2_f32_arith(x);
            let ulps = ulps_from(got, exact(x));
            assert!(ulps <= 3.5, "sin²({x:e}) = {got:e}: {ulps} ulp from {}", exact(x));
            worst = worst.max(ulps);
        };
        let mut x = -400.0f32;
        while x < 400.0 {
            check(x);
            x += 0.000_913;
        }
        let mut x = 400.0f32;
        while x < SIN_F32_ARITH_LIMIT {
            check(x);
            check(-x);
            x *= 1.000_01;
        }
        for j in 1..4_000 {
            let near = (j as f64 * std::f64::consts::FRAC_PI_4) as f32;
            for x in [near, f32::from_bits(near.to_bits() - 1), f32::from_bits(near.to_bits() + 1)] {
                check(x);
                check(-x);
            }
        }
        for x in [0.0f32, -0.0, 1e-30, -1e-20, 1e-4] {
            check(x);
        }
        println!("sin2_f32_arith: worst {worst:.3} ulp");
        // The bound is tight enough to catch a reduction without its last part (D): near the
        // zeros of sin² (t ≈ jπ/2, j even, where sin²t = sin²r) the reduced argument is then
        // 2–3 ulp off, and its square twice that.
        let mut worst_three_part = 0.0f64;
        for j in (2..2_000).step_by(2) {
            let near = (j as f64 * std::f64::consts::FRAC_PI_2) as f32;
            for x in [near, f32::from_bits(near.to_bits() - 1), f32::from_bits(near.to_bits() + 1)] {
                let q = (x * std::f32::consts::FRAC_2_PI).round_ties_even();
                let r = (-q).mul_add(7.549_79e-8, (x - q * 1.570_312_5) - q * 4.837_513e-4);
                worst_three_part = worst_three_part.max(ulps_from(sin_poly(r, r * r).powi(2), exact(x)));
            }
        }
        assert!(worst_three_part > 3.5, "the test cannot tell a three-part reduction (worst {worst_three_part} ulp)");
        let (r, _) = reduce_by_half_pi(1.0);
        let one_formula = sin_poly(r, r * r).powi(2);
        assert!(ulps_from(one_formula, exact(1.0)) > 1e5, "s² alone must fail in an odd quadrant");
    }

    #[test]
    fn sin2_f32_is_within_4e_7_of_the_exact_square_up_to_its_limit() {
        // Dense where Snake's arguments live, sparse out to the limit.
        let mut worst = 0.0f64;
        let mut check = |t: f32| {
            let want = (t as f64).sin().powi(2);
            worst = worst.max((sin2_f32(t) as f64 - want).abs());
        };
        let mut t = -300.0f32;
        while t < 300.0 {
            check(t);
            t += 0.000_731;
        }
        let mut t = 300.0f32;
        while t < SIN2_F32_LIMIT {
            check(t);
            check(-t);
            t += 0.377;
        }
        println!("sin2_f32: worst {worst:e}");
        assert!(worst <= 4e-7, "sin² off by {worst:e}");
        // The bound is not loose enough to pass a reduction by a two-part π: that leaves
        // k·1.5e-7 in the argument (~1e-4 near the limit).
        let two_part = |t: f32| {
            let k = (t * std::f32::consts::FRAC_1_PI).round_ties_even();
            let r = (t - k * 3.140_625) - k * 9.675_026e-4;
            (r as f64).sin().powi(2)
        };
        let t = 15_000.3f32;
        assert!((two_part(t) - (t as f64).sin().powi(2)).abs() > 4e-7);
    }

    #[test]
    fn snake_row_f32_is_snake_within_the_sin2_bound_and_hands_wide_rows_on() {
        let alpha = [0.5f32, 2.0, 1.0, 7.5];
        let inv: Vec<f32> = alpha.iter().map(|a| 1.0 / a).collect();
        for x0 in [[0.3f32, -1.7, 12.0, 0.01], [3.0e6, -1.7, 12.0, 0.01]] {
            let mut x = x0;
            snake_row_f32(&mut x, &alpha, &inv);
            for j in 0..4 {
                let s = (alpha[j] as f64 * x0[j] as f64).sin();
                let want = x0[j] as f64 + s * s / alpha[j] as f64;
                // sin²'s 4e-7 over α, plus the f32 roundings of the product and the sum.
                let bound = 4e-7 / alpha[j] as f64 + 2e-7 * (1.0 + want.abs());
                assert!((x[j] as f64 - want).abs() <= bound, "{x0:?}[{j}]: {} vs {want}", x[j]);
            }
        }
    }

    /// The one-pass norm + Snake gives the two passes' bits, for both Snakes: rows of 37
    /// channels (vector body and tail), in range, with one argument past both sines' fast
    /// limits, and with a NaN.
    #[test]
    fn normalize_snake_rows_are_normalize_then_snake_bit_for_bit() {
        let c = 37;
        let at = |i: usize, s: f32| (i as f32 * 0.37 + s).sin() * 3.0;
        let mean: Vec<f32> = (0..c).map(|i| at(i, 1.0)).collect();
        let scale: Vec<f32> = (0..c).map(|i| 0.5 + at(i, 2.0).abs()).collect();
        let shift: Vec<f32> = (0..c).map(|i| at(i, 3.0)).collect();
        let alpha: Vec<f32> = (0..c).map(|i| 0.2 + at(i, 4.0).abs()).collect();
        let inv: Vec<f32> = alpha.iter().map(|a| 1.0 / a).collect();
        let base: Vec<f32> = (0..c).map(|i| at(i, 5.0) * 4.0).collect();
        let mut far = base.clone();
        far[30] = 1.0e5;
        let mut nan = base.clone();
        nan[3] = f32::NAN;
        for x in [base, far, nan] {
            let mut want = vec![0.0f32; c];
            normalize_row(&mut want, &x, &mean, &scale, &shift);
            snake_row_f32(&mut want, &alpha, &inv);
            let mut got = vec![0.0f32; c];
            normalize_snake_row_f32(&mut got, &x, (&mean, &scale, &shift), &alpha, &inv);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "input {x:?}");
            // The f32 backend's Snake, its sine to 2 ulp: the same from its one pass.
            normalize_row(&mut want, &x, &mean, &scale, &shift);
            snake_row(&mut want, &alpha, &inv);
            normalize_snake_row(&mut got, &x, (&mean, &scale, &shift), &alpha, &inv);
            assert_eq!(bits(&got), bits(&want), "input {x:?}, exact sine");
        }
    }

    #[test]
    fn snake_row_takes_libm_past_the_fast_limit() {
        let alpha = [0.5f32, 2.0, 1.0];
        let inv: Vec<f32> = alpha.iter().map(|a| 1.0 / a).collect();
        // All three paths: the f32-arithmetic sine, the one through f64 (an argument past
        // 8,192) and libm's (past 10⁶).
        for x0 in [[0.3f32, -1.7, 12.0], [0.3, -1.7, 12_000.0], [3.0e6, -1.7, 12.0]] {
            let mut x = x0;
            snake_row(&mut x, &alpha, &inv);
            for j in 0..3 {
                let s = (alpha[j] as f64 * x0[j] as f64).sin();
                let want = x0[j] as f64 + s * s / alpha[j] as f64;
                assert!((x[j] as f64 - want).abs() <= 2e-7 * (1.0 + want.abs()), "{x0:?}[{j}]: {} vs {want}", x[j]);
            }
        }
    }

    /// Every f16 bit pattern widens to the value the `half` crate gives (NaNs to NaNs), through
    /// the vector body and the tail alike.
    #[test]
    fn widen_f16_gives_every_value_exactly() {
        let all: Vec<half::f16> = (0..=u16::MAX).map(half::f16::from_bits).collect();
        for len in [all.len(), 15, 17, 33] {
            let src = &all[all.len() - len..];
            let mut got = vec![0.0f32; len];
            widen_f16(src, &mut got);
            for (h, g) in src.iter().zip(&got) {
                let want = h.to_f32();
                assert!(g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()), "{:#06x}: {g} vs {want}", h.to_bits());
            }
        }
    }

    /// The instance-norm kernels run on the widest vectors the CPU has, yet must give the bits
    /// of the plain per-channel loops (each channel summed over the rows in order, no fused
    /// multiply-add), so results do not depend on the CPU. A fused `(x − m)·a + d` is shown to
    /// differ, so the comparison can tell.
    #[test]
    fn instance_norm_kernels_match_the_plain_loops_bit_for_bit() {
        let (rows, c) = (37, 45);
        let x: Vec<f32> = (0..rows * c).map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 11.0).collect();
        let mean: Vec<f64> = (0..c).map(|j| j as f64 / 7.0 - 2.5).collect();
        let (mut sums, mut squares) = (vec![0.25f64; c], vec![0.5f64; c]);
        add_rows_f64(&mut sums, &x);
        add_squared_deviations_f64(&mut squares, &x, &mean);
        for j in 0..c {
            let (mut s, mut q) = (0.25f64, 0.5f64);
            for r in 0..rows {
                let v = x[r * c + j] as f64;
                s += v;
                q += (v - mean[j]) * (v - mean[j]);
            }
            assert_eq!(sums[j].to_bits(), s.to_bits(), "sum of channel {j}");
            assert_eq!(squares[j].to_bits(), q.to_bits(), "squared deviations of channel {j}");
        }
        let m: Vec<f32> = (0..c).map(|j| j as f32 / 3.0 - 7.0).collect();
        let a: Vec<f32> = (0..c).map(|j| 0.1 + j as f32 / 17.0).collect();
        let d: Vec<f32> = (0..c).map(|j| j as f32 / 29.0 - 0.7).collect();
        let mut fused_differs = false;
        for row in x.chunks_exact(c) {
            let mut out = vec![0.0f32; c];
            normalize_row(&mut out, row, &m, &a, &d);
            for j in 0..c {
                assert_eq!(out[j].to_bits(), ((row[j] - m[j]) * a[j] + d[j]).to_bits(), "normalised channel {j}");
                fused_differs |= out[j].to_bits() != (row[j] - m[j]).mul_add(a[j], d[j]).to_bits();
            }
        }
        assert!(fused_differs, "no value tells a fused multiply-add from two roundings");
    }

    #[test]
    fn gemv_rows_acc_matches_f64_for_every_row_and_tail() {
        // 7 rows (one quad and a remainder of 3) of 37 columns (two 16-lane chunks and a tail
        // of 5), added onto a non-zero output: each path of the kernel is exercised.
        let (rows, k) = (7, 37);
        let w: Vec<f32> = (0..rows * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        let v: Vec<f32> = (0..k).map(|i| ((i * 104_729) % 997) as f32 / 997.0 - 0.5).collect();
        let mut out: Vec<f32> = (0..rows).map(|r| r as f32).collect();
        gemv_rows_acc(&w, &v, &mut out);
        for r in 0..rows {
            let want = r as f64 + (0..k).map(|j| w[r * k + j] as f64 * v[j] as f64).sum::<f64>();
            assert!((out[r] as f64 - want).abs() < 1e-5, "row {r}: {} vs {want}", out[r]);
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

dispatch! {
    /// In place `s = exp(s − max)` through [`exp`], returning Σ s: one softmax row without
    /// the division, which the caller folds into the output scaling.
    pub fn exp_shift_sum_lanes(s: &mut [f32], max: f32) -> f32 {
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

#[cfg(test)]
mod exp_bits_tests {
    use super::*;

    /// The straightforward form of [`exp`]: the same reduction and polynomial, the power of two
    /// from a float → int cast.
    fn exp_by_cast(x: f32) -> f32 {
        let x = x.clamp(-87.3, 88.7);
        let n = (x * LOG2E + ROUND_MAGIC) - ROUND_MAGIC;
        let r = x - n * LN2_HI - n * LN2_LO;
        let z = r * r;
        let p = ((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.5;
        let e = p * z + r + 1.0;
        e * f32::from_bits(((n as i32 + 127) as u32) << 23)
    }

    /// The exponent taken from the bits gives the cast form's values bit for bit, over the
    /// whole clamped range and past both ends; `exp_shift_sum_lanes` gives the values of `exp`.
    #[test]
    fn exp_is_the_cast_form_bit_for_bit() {
        let mut x = -100.0f32;
        while x < 100.0 {
            assert_eq!(exp(x).to_bits(), exp_by_cast(x).to_bits(), "x = {x}");
            x += 0.000_37;
        }
        for x in [-87.3, 88.7, 0.0, -0.0, f32::MIN, f32::MAX, f32::NEG_INFINITY] {
            assert_eq!(exp(x).to_bits(), exp_by_cast(x).to_bits(), "x = {x}");
        }
        let row: Vec<f32> = (0..1003).map(|i| ((i * 7919) % 2000) as f32 / 100.0 - 15.0).collect();
        let mut got = row.clone();
        let sum = exp_shift_sum_lanes(&mut got, 5.0);
        assert!(got.iter().zip(&row).all(|(g, &x)| g.to_bits() == exp(x - 5.0).to_bits()));
        let want: f64 = row.iter().map(|&x| exp(x - 5.0) as f64).sum();
        // f32 sum of 1003 positive terms: within 1003·2⁻²⁴ relative of the exact sum.
        assert!((sum as f64 - want).abs() <= want * 1003.0 * f64::powi(2.0, -24), "{sum} vs {want}");
    }
}
