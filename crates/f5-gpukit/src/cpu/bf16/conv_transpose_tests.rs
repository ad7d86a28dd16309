//! The bf16 dense transposed convolution against a scalar reference of its exact arithmetic
//! (where the CPU has AVX-512 BF16; on the AVX-512 kernel and, where the CPU has them, the AMX
//! tiles) and against an f64 transposed convolution with a bound derived from bf16 rounding (on
//! every machine; the reference stands in for the kernel where the CPU lacks the feature).
//!
//! Tolerances (`T` = taps landing on one output, ≤ `J` = ⌈K/stride⌉):
//! - kernel vs exact reference: both sum the same f32 products (bf16 × bf16 is exact in f32)
//!   and the bias, in different orders: the kernel at most `J·c_in` products then the bias, the
//!   reference each tap's `c_in` products then the taps onto the bias. Each is within
//!   `γ_n · Σ|terms|` of the exact sum for its chain length `n` (`γ_n ≈ n·2⁻²⁴`), so they differ
//!   by at most the sum of the two.
//! - reference vs f64: rounding each operand to bf16 changes a product by at most
//!   `(1 + 2⁻⁸)² − 1 < 2⁻⁷ + 2⁻¹⁶` relative, plus the kernel's f32 summation bound.
//!
//! Wrong variants (weights left unrounded, inputs left unrounded, contributions landing one
//! output row late) are run through the same checks and must fail them.

use super::conv_bf16_amx::AmxBf16;
use super::conv_transpose::conv_transpose1d_dense;
use crate::cpu::bf16::gemm::{from_bf16, to_bf16, Avx512Bf16};
use crate::cpu::bf16::CpuBf16Backend;
use crate::spec::ConvTranspose1dSpec;
use crate::{Backend, CpuBackend};

use super::test_rng::Rng;

/// Uniform in [−1, 1).
fn values(rng: &mut Rng, len: usize) -> Vec<f32> {
    (0..len).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect()
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    /// The arithmetic the kernel implements.
    Exact,
    /// Wrong: filters used at f32 precision.
    UnroundedWeights,
    /// Wrong: inputs used at f32 precision.
    UnroundedInputs,
    /// Wrong: every contribution lands one output row later.
    LandsOneLate,
}

/// `(y, Σ|terms| per output)`: each output row starts as the bias, then adds, for input rows in
/// ascending order, the f32 sum over input channels of bf16-rounded products (as a variant says).
fn reference(spec: &ConvTranspose1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, variant: Variant) -> (Vec<f32>, Vec<f64>) {
    let ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, stride, pad, .. } = *spec;
    let n_out = spec.n_out();
    let round = |v: f32, keep: bool| if keep { v } else { from_bf16(to_bf16(v)) };
    let late = usize::from(variant == Variant::LandsOneLate);
    let mut y = vec![0.0f32; batch * n_out * c_out];
    let mut mag = vec![0.0f64; y.len()];
    for b in 0..batch {
        for o in 0..n_out {
            for co in 0..c_out {
                let mut acc = bias.map_or(0.0, |bv| bv[co]);
                let mut m = 0.0f64;
                for i in 0..n {
                    // i·stride + k − pad + late = o
                    let Some(k) = (o + pad).checked_sub(i * stride + late) else { continue };
                    if k >= kernel {
                        continue;
                    }
                    let mut part = 0.0f32;
                    for ci in 0..c_in {
                        let (xv, wv) = (x[(b * n + i) * c_in + ci], w[(ci * c_out + co) * kernel + k]);
                        part += round(xv, variant == Variant::UnroundedInputs) * round(wv, variant == Variant::UnroundedWeights);
                        m += (xv as f64 * wv as f64).abs();
                    }
                    acc += part;
                }
                let at = (b * n_out + o) * c_out + co;
                y[at] = acc;
                mag[at] = m;
            }
        }
    }
    (y, mag)
}

/// The exact transposed convolution in f64 of the unrounded operands.
fn conv_transpose_f64(spec: &ConvTranspose1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, stride, pad, .. } = *spec;
    let n_out = spec.n_out();
    let mut y = vec![0.0f64; batch * n_out * c_out];
    for b in 0..batch {
        for o in 0..n_out {
            for co in 0..c_out {
                y[(b * n_out + o) * c_out + co] = bias.map_or(0.0, |bv| bv[co] as f64);
            }
        }
        for i in 0..n {
            for k in 0..kernel {
                let Some(o) = (i * stride + k).checked_sub(pad).filter(|&o| o < n_out) else { continue };
                for co in 0..c_out {
                    for ci in 0..c_in {
                        y[(b * n_out + o) * c_out + co] += x[(b * n + i) * c_in + ci] as f64 * w[(ci * c_out + co) * kernel + k] as f64;
                    }
                }
            }
        }
    }
    y
}

/// Outputs outside `|got − want| ≤ rel · Σ|terms| + 1e-30`.
fn violations(got: &[f32], want: &[f64], mag: &[f64], rel: f64) -> usize {
    // An output never written (NaN, as the tests fill `y`) counts too.
    got.iter().zip(want).zip(mag).filter(|((&g, &w), &m)| g.is_nan() || (g as f64 - w).abs() > rel * m + 1e-30).count()
}

/// The reference's f32 summation bound for one output: `c_in` products per tap, then
/// `⌈K/stride⌉` taps added onto the bias.
fn reference_sum_bound(spec: &ConvTranspose1dSpec) -> f64 {
    (spec.c_in + spec.kernel.div_ceil(spec.stride) + 2) as f64 * 2f64.powi(-24)
}

/// The kernel's: one chain of at most `⌈K/stride⌉·c_in` products, then the bias.
fn kernel_sum_bound(spec: &ConvTranspose1dSpec) -> f64 {
    (spec.kernel.div_ceil(spec.stride) * spec.c_in + 2) as f64 * 2f64.powi(-24)
}

/// Shapes: Kokoro's upsamplers scaled down (k20 s10 p5, k12 s6 p3), batch 2, output padding,
/// stride 1 and a kernel shorter than the stride (outputs no tap reaches: bias only), channels
/// not a multiple of the 32-wide tile, `c_in` odd and past one k block (`c_in > 2·KC_PAIRS`),
/// input rows not a multiple of the 12-row tile, and a single input row.
fn shapes() -> Vec<ConvTranspose1dSpec> {
    vec![
        ConvTranspose1dSpec::new(1, 13, 24, 16, 20, 10).pad(5),
        ConvTranspose1dSpec::new(2, 17, 16, 12, 12, 6).pad(3),
        ConvTranspose1dSpec::new(1, 9, 5, 7, 3, 2).pad(1).output_padding(1),
        ConvTranspose1dSpec::new(2, 11, 3, 33, 4, 1),
        ConvTranspose1dSpec::new(1, 7, 6, 5, 2, 3).output_padding(2),
        ConvTranspose1dSpec::new(1, 25, 301, 9, 5, 2).pad(2),
        ConvTranspose1dSpec::new(1, 1, 4, 3, 5, 2).pad(1),
        ConvTranspose1dSpec::new(1, 40, 64, 40, 12, 6).pad(3),
        ConvTranspose1dSpec::new(1, 6, 8, 4, 3, 2).pad(4),
    ]
}

fn data(spec: &ConvTranspose1dSpec, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut rng = Rng(seed);
    let x = values(&mut rng, spec.batch * spec.n * spec.c_in);
    let w = values(&mut rng, spec.c_in * spec.c_out / spec.groups * spec.kernel);
    let bias = values(&mut rng, spec.c_out);
    (x, w, bias)
}

fn kernel_available(test: &str) -> Option<Avx512Bf16> {
    match Avx512Bf16::detect() {
        Ok(cpu) => {
            println!("{test}: AVX-512 BF16 kernel ran");
            Some(cpu)
        }
        Err(missing) => {
            println!("{test}: AVX-512 BF16 kernel not run (this CPU lacks {missing}); reference only");
            None
        }
    }
}

/// The kernels to check: the AVX-512 one, and the AMX tiles where the CPU has them.
fn kernels() -> Vec<Option<AmxBf16>> {
    std::iter::once(None).chain(AmxBf16::detect().ok().map(Some)).collect()
}

/// The kernel (on the tiles where `tiles` is given) on a private pool of `threads`.
fn run_kernel(
    cpu: Avx512Bf16,
    tiles: Option<AmxBf16>,
    spec: &ConvTranspose1dSpec,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    threads: usize,
) -> Vec<f32> {
    let wb: Vec<u16> = w.iter().map(|&v| to_bf16(v)).collect();
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("test pool");
    pool.install(|| conv_transpose1d_dense(cpu, tiles, spec, x, &wb, bias, &mut y));
    y
}

#[test]
fn kernel_matches_the_exact_reference_and_wrong_variants_do_not() {
    let Some(cpu) = kernel_available("bf16 conv_transpose1d vs exact reference") else { return };
    for tiles in kernels() {
        println!("AMX tiles: {}", tiles.is_some());
        for (i, spec) in shapes().into_iter().enumerate() {
            let (x, w, bias) = data(&spec, 0x7a5e + i as u64);
            let rel = reference_sum_bound(&spec) + kernel_sum_bound(&spec);
            for threads in [1, 3] {
                for bias in [Some(&bias[..]), None] {
                    let got = run_kernel(cpu, tiles, &spec, &x, &w, bias, threads);
                    let (want, mag) = reference(&spec, &x, &w, bias, Variant::Exact);
                    let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
                    let bad = violations(&got, &want, &mag, rel);
                    assert_eq!(bad, 0, "{spec:?} AMX {} threads {threads}: {bad} outputs off the exact reference", tiles.is_some());
                }
            }
            let got = run_kernel(cpu, tiles, &spec, &x, &w, Some(&bias), 2);
            for wrong in [Variant::UnroundedWeights, Variant::UnroundedInputs, Variant::LandsOneLate] {
                let (want, mag) = reference(&spec, &x, &w, Some(&bias), wrong);
                let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
                assert!(violations(&got, &want, &mag, rel) > 0, "{spec:?}: the {wrong:?} variant passed the exact check");
            }
        }
    }
}

#[test]
fn bf16_conv_transpose_is_within_the_bf16_bound_of_the_f64_one() {
    let cpu = kernel_available("bf16 conv_transpose1d vs f64");
    for (i, spec) in shapes().into_iter().enumerate() {
        let (x, w, bias) = data(&spec, 0xf640 + i as u64);
        let want = conv_transpose_f64(&spec, &x, &w, Some(&bias));
        let (reference_y, mag) = reference(&spec, &x, &w, Some(&bias), Variant::Exact);
        let rel = 2f64.powi(-7) + 2f64.powi(-16) + kernel_sum_bound(&spec).max(reference_sum_bound(&spec));
        let got = match cpu {
            Some(cpu) => run_kernel(cpu, AmxBf16::detect().ok(), &spec, &x, &w, Some(&bias), 2),
            None => reference_y,
        };
        let bad = violations(&got, &want, &mag, rel);
        assert_eq!(bad, 0, "{spec:?}: {bad} outputs outside the bf16 bound of the f64 transposed conv");
        // The bound is not vacuous: contributions one row late break it.
        let (late, _) = reference(&spec, &x, &w, Some(&bias), Variant::LandsOneLate);
        assert!(violations(&late, &want, &mag, rel) > 0, "{spec:?}: contributions one row late passed the f64 check");
    }
}

#[test]
fn backend_runs_dense_bf16_filters_on_the_kernel_and_grouped_ones_in_f32() {
    let Some(cpu) = kernel_available("bf16 backend conv_transpose1d") else { return };
    let bf16 = CpuBf16Backend::with_threads(2).expect("bf16 backend").with_bf16_dot_products(true);
    let f32k = CpuBackend::with_threads(2).expect("f32 backend");
    // Dense: the backend gives what the kernel gives (on the tiles where the CPU has them).
    let spec = ConvTranspose1dSpec::new(2, 21, 12, 10, 12, 6).pad(3);
    let (x, w, bias) = data(&spec, 7);
    let n_y = spec.batch * spec.n_out() * spec.c_out;
    let (xb, wb, bb) = (bf16.upload(&x).unwrap(), bf16.upload_weight(&w).unwrap(), bf16.upload(&bias).unwrap());
    assert!(wb.is_bf16());
    let mut yb = bf16.alloc(n_y).unwrap();
    bf16.conv_transpose1d(&spec, &xb, &wb, Some(&bb), &mut yb).unwrap();
    let want = run_kernel(cpu, AmxBf16::detect().ok(), &spec, &x, &w, Some(&bias), 2);
    assert_eq!(bf16.download(&yb).unwrap(), want);
    // Depthwise (the AdaIN blocks' pool): the f32 transposed conv of the bf16-rounded filters.
    let spec = ConvTranspose1dSpec::new(1, 15, 8, 8, 3, 2).pad(1).output_padding(1).groups(8);
    let (x, w, bias) = data(&spec, 8);
    let rounded: Vec<f32> = w.iter().map(|&v| from_bf16(to_bf16(v))).collect();
    let (xb, wb, bb) = (bf16.upload(&x).unwrap(), bf16.upload_weight(&w).unwrap(), bf16.upload(&bias).unwrap());
    let mut yb = bf16.alloc(spec.n_out() * spec.c_out).unwrap();
    bf16.conv_transpose1d(&spec, &xb, &wb, Some(&bb), &mut yb).unwrap();
    let mut yf = vec![0.0; spec.n_out() * spec.c_out];
    f32k.conv_transpose1d(&spec, &x, &rounded, Some(&bias), &mut yf).unwrap();
    assert_eq!(bf16.download(&yb).unwrap(), yf);
    // A wrong filter length is refused, not read past.
    let short = bf16.upload_weight(&w[1..]).unwrap();
    assert!(bf16.conv_transpose1d(&spec, &xb, &short, Some(&bb), &mut yb).is_err());
}
