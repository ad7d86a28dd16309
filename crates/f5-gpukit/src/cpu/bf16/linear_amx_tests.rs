//! The split-bf16 `Linear` (`linear_amx`) against f64 products of the f32 operands.
//!
//! Tolerances:
//! - the split itself: `hi = bf16(v)` is within `2⁻⁸·|v|` of `v` (bf16's unit roundoff), and
//!   `lo = bf16(v − hi)` within `2⁻⁸·|v − hi|` of the rest, so `|v − hi − lo| ≤ 2⁻¹⁶·|v|`.
//! - each output, against the same three products summed exactly (f64): the kernel sums `3·k`
//!   products, exact in f32, in f32, so it is within `γ = 3k·2⁻²⁴` of `Σ|terms|` of them.
//! - the whole output, against f64 products of the f32 operands: rel-L2 below 1e-4. Each
//!   product is within `3·2⁻¹⁶ ≈ 4.6e-5` of the exact one in the worst case and the errors have
//!   random signs, so the measured rel-L2 is ~3e-6; plain bf16 operands (rounding `2⁻⁹` on
//!   average) give ~2e-3, and dropping either cross term ~1e-3 — the wrong variants below,
//!   which must fail the bound.

use super::amx::AmxBf16;
use super::gemm::{from_bf16, Avx512Bf16};
use super::linear_amx::{linear, split, SplitLinear};
use super::test_rng::Rng;
use super::{CpuBf16Backend, Repr};
use crate::spec::{GemmSpec, MatLayout};
use crate::{Backend, KitError};

impl Rng {
    /// Uniform in [−1, 1) times `scale`.
    fn values(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| ((self.unit() * 2.0 - 1.0) as f32) * scale).collect()
    }
}

/// Which products an emulation sums.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    /// `a_lo·w_hi + a_hi·w_hi + a_hi·w_lo`: the kernel's arithmetic.
    Split,
    /// Wrong: plain bf16 operands (`a_hi·w_hi`).
    HiOnly,
    /// Wrong: the activations' rest dropped (`a_hi·w_hi + a_hi·w_lo`).
    NoActivationRest,
    /// Wrong: the weights' rest dropped (`a_lo·w_hi + a_hi·w_hi`).
    NoWeightRest,
}

/// `(y, Σ|terms|)` per output: `variant`'s products summed in f64, with the bias.
fn emulate(variant: Variant, x: &[f32], w: &[f32], bias: Option<&[f32]>, rows: usize, inp: usize, out: usize) -> (Vec<f64>, Vec<f64>) {
    let parts = |v: f32| {
        let (h, l) = split(v);
        (from_bf16(h) as f64, from_bf16(l) as f64)
    };
    let mut y = vec![0.0; rows * out];
    let mut mag = vec![0.0; rows * out];
    for r in 0..rows {
        for j in 0..out {
            let (mut s, mut m) = (bias.map_or(0.0, |b| b[j] as f64), 0.0);
            for c in 0..inp {
                let ((ah, al), (wh, wl)) = (parts(x[r * inp + c]), parts(w[j * inp + c]));
                let terms = match variant {
                    Variant::Split => [al * wh, ah * wh, ah * wl],
                    Variant::HiOnly => [0.0, ah * wh, 0.0],
                    Variant::NoActivationRest => [0.0, ah * wh, ah * wl],
                    Variant::NoWeightRest => [al * wh, ah * wh, 0.0],
                };
                s += terms.iter().sum::<f64>();
                m += terms.iter().map(|t| t.abs()).sum::<f64>();
            }
            y[r * out + j] = s;
            mag[r * out + j] = m;
        }
    }
    (y, mag)
}

/// f64 products of the f32 operands: the exact `Linear`.
fn exact(x: &[f32], w: &[f32], bias: Option<&[f32]>, rows: usize, inp: usize, out: usize) -> Vec<f64> {
    (0..rows * out)
        .map(|i| {
            let (r, j) = (i / out, i % out);
            let dot: f64 = (0..inp).map(|c| x[r * inp + c] as f64 * w[j * inp + c] as f64).sum();
            dot + bias.map_or(0.0, |b| b[j] as f64)
        })
        .collect()
}

fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// The bound the whole output must meet against the exact `Linear` (module docs).
const REL_L2_BOUND: f64 = 1e-4;

/// Shapes `(rows, inp, out)`: one tile; partial tiles in rows, columns and pairs (odd `inp`, a
/// last step with padding pairs); a second row chunk; ALBERT's FFN shape at a short sentence.
const SHAPES: [(usize, usize, usize); 7] =
    [(32, 32, 32), (1, 1, 1), (5, 7, 3), (33, 130, 70), (150, 64, 40), (58, 768, 96), (17, 2048, 33)];

#[test]
fn the_split_keeps_sixteen_bits_and_infinities() {
    let mut rng = Rng(0x5EED_0001);
    for exp in [-30i32, -8, -1, 0, 3, 20] {
        for v in rng.values(2000, 2f32.powi(exp)) {
            let (h, l) = split(v);
            let err = (v as f64 - from_bf16(h) as f64 - from_bf16(l) as f64).abs();
            assert!(err <= (v as f64).abs() * 2f64.powi(-16), "{v}: rest {err}");
        }
    }
    for v in [f32::INFINITY, f32::NEG_INFINITY] {
        let (h, l) = split(v);
        assert_eq!((from_bf16(h), l), (v, 0), "{v} is its hi part alone");
    }
    assert!(from_bf16(split(f32::NAN).0).is_nan());
}

/// The AMX bf16 tiles and AVX-512 BF16, where this CPU and Linux give them; else `None`, saying
/// that `what` is not run.
fn tile_kernels(what: &str) -> Option<(AmxBf16, Avx512Bf16)> {
    match (AmxBf16::detect(), Avx512Bf16::detect()) {
        (Ok(amx), Ok(cpu)) => Some((amx, cpu)),
        _ => {
            eprintln!("AMX bf16 tiles not available here: {what} is not run");
            None
        }
    }
}

#[test]
fn the_kernel_sums_the_three_products_and_meets_the_bound_the_wrong_variants_miss() {
    let Some((amx, cpu)) = tile_kernels("the split kernel (the backend computes these layers in f32)") else { return };
    let mut rng = Rng(0x5EED_0002);
    for (rows, inp, out) in SHAPES {
        let x = rng.values(rows * inp, 2.0);
        let w = rng.values(out * inp, 0.1);
        let bias = rng.values(out, 0.5);
        let packed = SplitLinear::pack(&w, out, inp);
        let mut y = vec![f32::NAN; rows * out];
        linear(amx, cpu, &packed, &x, rows, Some(&bias), &mut y);
        let y64: Vec<f64> = y.iter().map(|&v| v as f64).collect();
        // Against the same products summed exactly: f32 summation rounding only.
        let (want, mag) = emulate(Variant::Split, &x, &w, Some(&bias), rows, inp, out);
        let gamma = 3.0 * inp as f64 * 2f64.powi(-24);
        for (i, ((g, e), m)) in y64.iter().zip(&want).zip(&mag).enumerate() {
            let tol = gamma * (m + bias[i % out].abs() as f64) + 1e-30;
            assert!((g - e).abs() <= tol, "{rows}×{inp}→{out} output {i}: {g} vs {e} (tolerance {tol:e})");
        }
        // Against the exact Linear: the bound, which the wrong variants miss. A handful of
        // products (inp < 32) is too few for the errors' random signs to average out: those
        // shapes check the kernel's arithmetic above only.
        if inp >= 32 {
            let exact = exact(&x, &w, Some(&bias), rows, inp, out);
            let err = rel_l2(&y64, &exact);
            assert!(err < REL_L2_BOUND, "{rows}×{inp}→{out}: rel-L2 {err:e}");
            for wrong in [Variant::HiOnly, Variant::NoActivationRest, Variant::NoWeightRest] {
                let (y_wrong, _) = emulate(wrong, &x, &w, Some(&bias), rows, inp, out);
                let e = rel_l2(&y_wrong, &exact);
                assert!(e > REL_L2_BOUND, "{rows}×{inp}→{out}: the {wrong:?} variant passes ({e:e})");
            }
        }
    }
}

#[test]
fn the_backend_runs_linear_weights_on_the_split_kernel_with_any_thread_count() {
    let mut rng = Rng(0x5EED_0003);
    let (rows, inp, out) = (70, 96, 72);
    let x = rng.values(rows * inp, 1.0);
    let w = rng.values(out * inp, 0.2);
    let bias = rng.values(out, 0.1);
    let exact = exact(&x, &w, Some(&bias), rows, inp, out);
    let mut first: Option<Vec<f32>> = None;
    for threads in [1, 2, 3] {
        let kit = CpuBf16Backend::with_threads(threads).expect("backend");
        let weight = kit.upload_linear_weight_near_f32(&w, out, inp).expect("upload");
        assert_eq!(matches!(weight.0, Repr::Split(_)), kit.amx_convs(), "split exactly where the tiles run");
        let (xb, bb) = (kit.upload(&x).expect("x"), kit.upload(&bias).expect("bias"));
        let mut y = kit.alloc(rows * out).expect("y");
        kit.gemm(&GemmSpec::linear(rows, inp, out), &xb, &weight, Some(&bb), &mut y).expect("gemm");
        let y = kit.download(&y).expect("download");
        let err = rel_l2(&y.iter().map(|&v| v as f64).collect::<Vec<_>>(), &exact);
        assert!(err < REL_L2_BOUND, "{threads} threads: rel-L2 {err:e}");
        // Each output is one tile's sum in a fixed order: the blocking does not change it.
        match &first {
            None => first = Some(y),
            Some(f) => assert!(f == &y, "{threads} threads changed the bits"),
        }
    }
}

/// Where the AMX tiles run, the split form; elsewhere the f32 upload (both branches are what
/// `upload_linear_weight_near_f32` documents).
#[test]
fn other_uses_read_hi_plus_lo_and_writes_are_refused() {
    let kit = CpuBf16Backend::with_threads(2).expect("backend");
    let mut rng = Rng(0x5EED_0004);
    let (inp, out) = (40, 24);
    let w = rng.values(out * inp, 1.0);
    let mut weight = kit.upload_linear_weight_near_f32(&w, out, inp).expect("upload");
    let held = kit.download(&weight).expect("download");
    for (h, v) in held.iter().zip(&w) {
        assert!((h - v).abs() <= v.abs() * 2f32.powi(-16), "read back {h} for {v}");
    }
    // A product in another layout (the weight as an untransposed [inp, out] matrix: a batch
    // item of 3 rows) reads the same values: the f32 GEMM on them.
    let x = rng.values(3 * out, 1.0);
    let spec = GemmSpec {
        m: 3,
        n: inp,
        k: out,
        batch: 1,
        a: MatLayout::row_major(out),
        b: MatLayout::row_major(inp),
        c: MatLayout::row_major(inp),
        beta: 0.0,
    };
    let mut y = kit.alloc(3 * inp).expect("y");
    kit.gemm(&spec, &kit.upload(&x).expect("x"), &weight, None, &mut y).expect("gemm");
    let mut want = kit.alloc(3 * inp).expect("want");
    kit.gemm(&spec, &kit.upload(&x).expect("x"), &kit.upload(&held).expect("held"), None, &mut want).expect("gemm");
    assert_eq!(kit.download(&y).expect("y"), kit.download(&want).expect("want"));
    if matches!(weight.0, Repr::Split(_)) {
        // Writes and fills are refused and leave the values.
        assert!(matches!(kit.write(&mut weight, 0, &[1.0]), Err(KitError::Shape { .. })));
        assert!(matches!(kit.fill(&mut weight, 0, 4, 0.0), Err(KitError::Shape { .. })));
        assert_eq!(kit.download(&weight).expect("download"), held);
    } else {
        // Without the tiles it is the plain f32 upload: exact, and written like any buffer.
        assert!(!kit.amx_convs(), "split exactly where the tiles run");
        assert_eq!(held, w);
        kit.write(&mut weight, 0, &[1.0]).expect("write");
        assert_eq!(kit.download(&weight).expect("download")[0], 1.0);
    }
    // A length that is not out·inp is an error, on every backend.
    assert!(matches!(kit.upload_linear_weight_near_f32(&w[1..], out, inp), Err(KitError::Shape { .. })));
    assert!(matches!(crate::CpuBackend::new().upload_linear_weight_near_f32(&w[1..], out, inp), Err(KitError::Shape { .. })));
}

/// The bf16 form against the bf16 GEMM module's arithmetic (`gemm::reference`: inputs rounded
/// to bf16, products exact, summed in f32 in k order): the tiles sum the same exact products in
/// another order, so each output is within `γ = k·2⁻²⁴` of `Σ|products|` of the reference (both
/// are within half that of the exact sum). Left unrounded, the activations' products move by
/// up to 2⁻⁸ each — the wrong variant, which must miss that bound where k is a few hundred.
#[test]
fn the_bf16_form_sums_the_bf16_gemm_products() {
    use super::gemm::{reference, to_bf16, Operand};
    let Some((amx, cpu)) = tile_kernels("the bf16 tile kernel") else { return };
    let mut rng = Rng(0x5EED_0005);
    for (rows, inp, out) in SHAPES.into_iter().chain([(16, 64, 32), (300, 96, 130)]) {
        let x = rng.values(rows * inp, 2.0);
        let w: Vec<u16> = rng.values(out * inp, 0.1).iter().map(|&v| to_bf16(v)).collect();
        let bias = rng.values(out, 0.5);
        let mut y = vec![f32::NAN; rows * out];
        super::linear_amx::linear_bf16(amx, cpu, &w, (out, inp), &x, rows, Some(&bias), &mut y);
        let spec = GemmSpec::linear(rows, inp, out);
        let mut want = vec![0.0f32; rows * out];
        reference(&spec, Operand::F32(&x), Operand::Bf16(&w), Some(&bias), &mut want);
        let gamma = inp as f64 * 2f64.powi(-24);
        let mut unrounded_misses = false;
        for i in 0..rows * out {
            let (r, j) = (i / out, i % out);
            let (xr, wj) = (&x[r * inp..(r + 1) * inp], &w[j * inp..(j + 1) * inp]);
            let products = |round: bool| {
                xr.iter().zip(wj).map(move |(&a, &b)| {
                    let a = if round { from_bf16(to_bf16(a)) } else { a };
                    a as f64 * from_bf16(b) as f64
                })
            };
            let mag: f64 = products(true).map(f64::abs).sum::<f64>() + bias[j].abs() as f64;
            let tol = gamma * mag + 1e-30;
            let err = (y[i] as f64 - want[i] as f64).abs();
            assert!(err <= tol, "{rows}×{inp}→{out} output {i}: {} vs {} (tolerance {tol:e})", y[i], want[i]);
            let unrounded = products(false).sum::<f64>() + bias[j] as f64;
            unrounded_misses |= (unrounded - want[i] as f64).abs() > tol;
        }
        // The bound is the worst case of f32 summation, which grows with k faster than the
        // random-signed rounding of the variant does (~√k): it tells them apart up to a few
        // hundred products per output.
        if (32..=256).contains(&inp) {
            assert!(unrounded_misses, "{rows}×{inp}→{out}: unrounded activations pass the bound");
        }
    }
}
