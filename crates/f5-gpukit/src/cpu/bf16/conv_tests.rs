//! The bf16 dense convolution against a scalar reference of its exact arithmetic (where the CPU
//! has AVX-512 BF16) and against an f64 convolution with a bound derived from bf16 rounding (on
//! every machine; the reference stands in for the kernel where the CPU lacks the feature).
//!
//! Tolerances:
//! - kernel vs exact reference: both sum the same f32 products (bf16 × bf16 is exact in f32),
//!   in different orders, so each is within `γ_kc · Σ|terms|` of the exact sum (`γ_n ≈ n·2⁻²⁴`)
//!   and they differ by at most twice that (plus the bias addition's rounding).
//! - reference vs f64: rounding each operand to bf16 changes a product by at most
//!   `(1 + 2⁻⁸)² − 1 < 2⁻⁷ + 2⁻¹⁶` relative, plus the f32 summation bound above.
//!
//! Wrong variants (weights left unrounded, inputs left unrounded, taps read one step off, padding
//! taps reading the edge row instead of zero) are
//! run through the same checks and must fail them.

use super::amx::AmxBf16;
use super::{conv1d_dense, Bf16Filters, PackedBf16Filters};
use crate::cpu::bf16::gemm::{from_bf16, to_bf16, Avx512Bf16};
use crate::cpu::bf16::{CpuBf16Backend, CpuBuf};
use crate::spec::{Conv1dSpec, PadMode};
use crate::{Backend, CpuBackend};

use super::super::test_rng::Rng;

impl Rng {
    /// Uniform in [−1, 1).
    fn sym(&mut self) -> f32 {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
    }
    fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.sym()).collect()
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    /// The arithmetic the kernel implements.
    Exact,
    /// Wrong: filters used at f32 precision.
    UnroundedWeights,
    /// Wrong: im2col values used at f32 precision.
    UnroundedInputs,
    /// Wrong: each tap reads one input row further on.
    TapOffByOne,
    /// Wrong: taps on zero padding read the nearest edge row instead.
    PaddingReplicated,
}

/// `(y, Σ|terms| per output)`: y in f32 with products of bf16-rounded operands summed in (tap,
/// channel) order after the bias (as a variant says), the magnitudes for the error bounds.
fn reference(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, variant: Variant) -> (Vec<f32>, Vec<f64>) {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, stride, dilation, pad, .. } = *spec;
    let n_out = spec.n_out();
    let round = |v: f32, keep: bool| if keep { v } else { from_bf16(to_bf16(v)) };
    let shift = usize::from(variant == Variant::TapOffByOne);
    let pad_mode = if variant == Variant::PaddingReplicated { PadMode::Replicate } else { spec.pad_mode };
    let mut y = vec![0.0f32; batch * n_out * c_out];
    let mut mag = vec![0.0f64; y.len()];
    for b in 0..batch {
        for t in 0..n_out {
            for co in 0..c_out {
                let mut acc = 0.0f32;
                let mut m = 0.0f64;
                for k in 0..kernel {
                    let Some(s) = pad_mode.source(t * stride + k * dilation + shift, pad, n) else { continue };
                    for ci in 0..c_in {
                        let xv = round(x[(b * n + s) * c_in + ci], variant == Variant::UnroundedInputs);
                        let wv = round(w[(co * c_in + ci) * kernel + k], variant == Variant::UnroundedWeights);
                        acc += xv * wv;
                        m += (x[(b * n + s) * c_in + ci] as f64 * w[(co * c_in + ci) * kernel + k] as f64).abs();
                    }
                }
                let i = (b * n_out + t) * c_out + co;
                y[i] = bias.map_or(0.0, |bv| bv[co]) + acc;
                mag[i] = m;
            }
        }
    }
    (y, mag)
}

/// The exact convolution in f64 of the unrounded operands.
pub(in crate::cpu::bf16) fn conv_f64(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, stride, dilation, pad, .. } = *spec;
    let n_out = spec.n_out();
    let mut y = vec![0.0f64; batch * n_out * c_out];
    for b in 0..batch {
        for t in 0..n_out {
            for co in 0..c_out {
                let mut acc = bias.map_or(0.0, |bv| bv[co] as f64);
                for k in 0..kernel {
                    let Some(s) = spec.pad_mode.source(t * stride + k * dilation, pad, n) else { continue };
                    for ci in 0..c_in {
                        acc += x[(b * n + s) * c_in + ci] as f64 * w[(co * c_in + ci) * kernel + k] as f64;
                    }
                }
                y[(b * n_out + t) * c_out + co] = acc;
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

/// f32 summation bound for `terms` products (and a bias): `(terms + 2)·2⁻²⁴`.
fn f32_sum_bound(terms: usize) -> f64 {
    (terms + 2) as f64 * 2f64.powi(-24)
}

/// Shapes: (batch, n, c_in, c_out, kernel, stride, dilation, pad, pad mode). They cover the
/// generator's k3/k7/k11 with dilations 1/3/5, stride 2, padding on both sides, odd `K·c_in`,
/// long sums (`K·c_in` = 700 and 6150), channels not a multiple of the 32-wide tile
/// (the last panel 20 wide, so it is stored in both halves, the second masked), dilation 1
/// with 32 channels (16 pairs, a whole cache line: interior tiles run their taps as one run),
/// at strides 1 and 2,
/// row counts that are not a multiple of the 12-row tile or the row block, and an input wide
/// enough (`c_in` = 2050, not a multiple of the 32-value conversion) that the row blocks are
/// cut by the size of their bf16 input copy rather than by the thread count.
pub(in crate::cpu::bf16) fn shapes() -> Vec<Conv1dSpec> {
    let s = |batch, n, c_in, c_out, kernel, stride, dilation, pad| {
        Conv1dSpec::new(batch, n, c_in, c_out, kernel).stride(stride).dilation(dilation).pad(pad)
    };
    vec![
        s(2, 37, 5, 7, 3, 1, 1, 1),
        s(1, 50, 16, 40, 7, 1, 3, 9),
        s(1, 100, 33, 3, 11, 1, 5, 25),
        s(1, 29, 8, 8, 4, 2, 2, 3),
        s(1, 211, 100, 33, 7, 1, 1, 3),
        s(1, 5, 3, 2, 3, 1, 1, 0),
        s(1, 45, 10, 52, 3, 1, 1, 1),
        s(1, 70, 32, 20, 5, 1, 1, 2),
        s(1, 61, 32, 9, 3, 2, 1, 1),
        s(1, 400, 2050, 5, 3, 1, 2, 2),
        s(1, 40, 6, 9, 5, 1, 1, 2).pad_mode(PadMode::Reflect),
    ]
}

pub(in crate::cpu::bf16) fn data(spec: &Conv1dSpec, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut rng = Rng(seed);
    let x = rng.vec(spec.batch * spec.n * spec.c_in);
    let w = rng.vec(spec.c_out * (spec.c_in / spec.groups) * spec.kernel);
    let bias = rng.vec(spec.c_out);
    (x, w, bias)
}

fn kernel_available(test: &str) -> Option<Avx512Bf16> {
    match Avx512Bf16::detect() {
        Ok(cpu) => {
            let tiles = match AmxBf16::detect() {
                Ok(_) => "and the AMX bf16 tiles".to_string(),
                Err(why) => format!("(AMX bf16 tiles not run: {why})"),
            };
            println!("{test}: AVX-512 BF16 kernel {tiles} ran");
            Some(cpu)
        }
        Err(missing) => {
            println!("{test}: AVX-512 BF16 kernel not run (this CPU lacks {missing}); reference only");
            None
        }
    }
}

/// Every kernel this CPU runs: the AVX-512 one, and the AMX one where the tiles are there.
fn kernels() -> Vec<Option<AmxBf16>> {
    std::iter::once(None).chain(AmxBf16::detect().ok().map(Some)).collect()
}

/// Shapes for the AMX tiles' blocking: input channels that fill whole tiles (multiples of 32)
/// and ones that leave the last step part-padded (the other shapes here do too), padding at both
/// ends, partial row tiles and panels, a stride, reflection, a batch, fewer rows than one tile.
fn tile_shapes() -> Vec<Conv1dSpec> {
    let s = |batch, n, c_in, c_out, kernel, stride, dilation, pad| {
        Conv1dSpec::new(batch, n, c_in, c_out, kernel).stride(stride).dilation(dilation).pad(pad)
    };
    vec![
        s(2, 137, 32, 40, 7, 1, 3, 9),
        s(1, 300, 64, 96, 3, 1, 5, 5),
        s(1, 61, 96, 33, 3, 2, 1, 1),
        s(1, 90, 32, 17, 5, 1, 1, 2).pad_mode(PadMode::Reflect),
        s(1, 20, 128, 8, 11, 1, 1, 5),
        s(1, 150, 70, 64, 3, 1, 1, 1),
        s(1, 40, 1, 8, 5, 1, 1, 2),
    ]
}

/// The kernel on a private pool of `threads` (so the row blocking varies), on the tiles or not.
fn run_kernel(
    cpu: Avx512Bf16,
    tiles: Option<AmxBf16>,
    spec: &Conv1dSpec,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    threads: usize,
) -> Vec<f32> {
    run_kernel_on(cpu, tiles, None, spec, x, w, bias, threads)
}

/// As [`run_kernel`], with the filters packed first as an upload packs them when `prepacked` is
/// given: for the kernel of `Some(packed_for)` (which may be another than the one that runs).
#[allow(clippy::too_many_arguments)]
fn run_kernel_on(
    cpu: Avx512Bf16,
    tiles: Option<AmxBf16>,
    prepacked: Option<Option<AmxBf16>>,
    spec: &Conv1dSpec,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    threads: usize,
) -> Vec<f32> {
    let wb: Vec<u16> = w.iter().map(|&v| to_bf16(v)).collect();
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("test pool");
    pool.install(|| match prepacked {
        None => conv1d_dense(cpu, tiles, spec, x, Bf16Filters::Bits(&wb), bias, &mut y),
        Some(packed_for) => {
            let packed = PackedBf16Filters::pack(spec, packed_for, &wb);
            conv1d_dense(cpu, tiles, spec, x, Bf16Filters::Packed(&packed), bias, &mut y)
        }
    });
    y
}

#[test]
fn kernel_matches_the_exact_reference_and_wrong_variants_do_not() {
    let Some(cpu) = kernel_available("bf16 conv1d vs exact reference") else { return };
    for (i, spec) in shapes().into_iter().chain(tile_shapes()).enumerate() {
        let (x, w, bias) = data(&spec, 0x5eed + i as u64);
        let rel = 2.0 * f32_sum_bound(spec.kernel * spec.c_in);
        for (tiles, threads) in kernels().into_iter().flat_map(|k| [(k, 1), (k, 3)]) {
            for bias in [Some(&bias[..]), None] {
                let got = run_kernel(cpu, tiles, &spec, &x, &w, bias, threads);
                let (want, mag) = reference(&spec, &x, &w, bias, Variant::Exact);
                let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
                let bad = violations(&got, &want, &mag, rel);
                let amx = tiles.is_some() && super::amx::fits(&spec);
                assert_eq!(bad, 0, "{spec:?} AMX {amx} threads {threads}: {bad} outputs off the exact reference");
            }
        }
        for tiles in kernels() {
            let got = run_kernel(cpu, tiles, &spec, &x, &w, Some(&bias), 2);
            let mut wrongs = vec![Variant::TapOffByOne];
            // Rounding left out changes each product by ~2⁻⁹ with random signs, so its total grows
            // like √(K·c_in) while the worst-case summation bound grows like K·c_in: past ~1000
            // terms the bound no longer tells the two apart (the wide shape is there for blocking).
            if spec.kernel * spec.c_in <= 1024 {
                wrongs.extend([Variant::UnroundedWeights, Variant::UnroundedInputs]);
            }
            if spec.pad > 0 && spec.pad_mode == PadMode::Zeros {
                wrongs.push(Variant::PaddingReplicated);
            }
            for wrong in wrongs {
                let (want, mag) = reference(&spec, &x, &w, Some(&bias), wrong);
                let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
                assert!(violations(&got, &want, &mag, rel) > 0, "{spec:?}: the {wrong:?} variant passed the exact check");
            }
        }
    }
}

#[test]
fn bf16_conv_is_within_the_bf16_bound_of_the_f64_conv() {
    let cpu = kernel_available("bf16 conv1d vs f64");
    for (i, spec) in shapes().into_iter().chain(tile_shapes()).enumerate() {
        let (x, w, bias) = data(&spec, 0xf64 + i as u64);
        let want = conv_f64(&spec, &x, &w, Some(&bias));
        let (reference_y, mag) = reference(&spec, &x, &w, Some(&bias), Variant::Exact);
        let rel = 2f64.powi(-7) + 2f64.powi(-16) + f32_sum_bound(spec.kernel * spec.c_in);
        let got = match cpu {
            Some(cpu) => run_kernel(cpu, AmxBf16::detect().ok(), &spec, &x, &w, Some(&bias), 2),
            None => reference_y,
        };
        let bad = violations(&got, &want, &mag, rel);
        assert_eq!(bad, 0, "{spec:?}: {bad} outputs outside the bf16 bound of the f64 conv");
        // The bound is not vacuous: taps one row off break it.
        let (off, _) = reference(&spec, &x, &w, Some(&bias), Variant::TapOffByOne);
        assert!(violations(&off, &want, &mag, rel) > 0, "{spec:?}: taps one row off passed the f64 check");
    }
}

#[test]
fn backend_runs_dense_bf16_filters_on_the_kernel_and_grouped_ones_in_f32() {
    let Some(cpu) = kernel_available("bf16 backend conv1d") else { return };
    let bf16 = CpuBf16Backend::with_threads(2).expect("bf16 backend").with_bf16_dot_products(true);
    let f32k = CpuBackend::with_threads(2).expect("f32 backend");
    // Dense: the backend gives exactly what the kernel gives (same blocking, same pool size).
    let spec = Conv1dSpec::new(1, 64, 12, 20, 7).dilation(3).pad(9);
    let (x, w, bias) = data(&spec, 7);
    let n_y = spec.n_out() * spec.c_out;
    let (xb, wb, bb) = (bf16.upload(&x).unwrap(), bf16.upload_weight(&w).unwrap(), bf16.upload(&bias).unwrap());
    assert!(wb.is_bf16());
    let mut yb = bf16.alloc(n_y).unwrap();
    bf16.conv1d(&spec, &xb, &wb, Some(&bb), &mut yb).unwrap();
    let want = run_kernel(cpu, AmxBf16::detect().ok(), &spec, &x, &w, Some(&bias), 2);
    assert!(bf16.download(&yb).unwrap() == want, "the backend's dense conv is the kernel's");
    // The backend takes the AMX tiles where the CPU has them, and `without_amx` keeps the
    // AVX-512 kernel.
    let tiled = Conv1dSpec::new(1, 100, 64, 40, 3).dilation(2).pad(2);
    let (tx, tw, tb) = data(&tiled, 9);
    for (kit, tiles) in [(bf16.clone(), AmxBf16::detect().ok()), (bf16.clone().without_amx(), None)] {
        let (xb, wb, bb) = (kit.upload(&tx).unwrap(), kit.upload_weight(&tw).unwrap(), kit.upload(&tb).unwrap());
        let mut yb = kit.alloc(tiled.n_out() * tiled.c_out).unwrap();
        kit.conv1d(&tiled, &xb, &wb, Some(&bb), &mut yb).unwrap();
        let want = run_kernel(cpu, tiles, &tiled, &tx, &tw, Some(&tb), 2);
        assert!(kit.download(&yb).unwrap() == want, "AMX {}: the backend's dense conv is the kernel's", tiles.is_some());
    }
    // Grouped: the f32 conv of the bf16-rounded filters.
    let spec = Conv1dSpec::new(1, 30, 8, 8, 3).groups(4).pad(1);
    let (x, w, bias) = data(&spec, 8);
    let rounded: Vec<f32> = w.iter().map(|&v| from_bf16(to_bf16(v))).collect();
    let (xb, wb, bb) = (bf16.upload(&x).unwrap(), bf16.upload_weight(&w).unwrap(), bf16.upload(&bias).unwrap());
    let mut yb = bf16.alloc(spec.n_out() * spec.c_out).unwrap();
    bf16.conv1d(&spec, &xb, &wb, Some(&bb), &mut yb).unwrap();
    let mut yf = vec![0.0; spec.n_out() * spec.c_out];
    f32k.conv1d(&spec, &x, &rounded, Some(&bias), &mut yf).unwrap();
    assert_eq!(bf16.download(&yb).unwrap(), yf);
    // A wrong filter length is refused, not read past.
    let short = bf16.upload_weight(&w[1..]).unwrap();
    assert!(bf16.conv1d(&spec, &xb, &short, Some(&bb), &mut yb).is_err());
}

#[test]
fn filters_packed_at_upload_compute_as_the_bits_do_on_either_kernel_and_read_back_as_bf16() {
    let Some(cpu) = kernel_available("bf16 filters packed at upload") else { return };
    for (i, spec) in shapes().into_iter().chain(tile_shapes()).enumerate() {
        let (x, w, bias) = data(&spec, 0xbac + i as u64);
        for tiles in kernels() {
            let want = run_kernel(cpu, tiles, &spec, &x, &w, Some(&bias), 2);
            // Packed for the kernel that runs (used as it is), and for the other one (unpacked
            // and packed again per call): the same outputs, bit for bit.
            for packed_for in kernels() {
                let got = run_kernel_on(cpu, tiles, Some(packed_for), &spec, &x, &w, Some(&bias), 2);
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{spec:?} AMX {} packed for AMX {}: not the bits' outputs", tiles.is_some(), packed_for.is_some());
            }
        }
        // Read back (from any offset): the bf16 bits that were packed.
        let bits: Vec<u16> = w.iter().map(|&v| to_bf16(v)).collect();
        for tiles in kernels() {
            let packed = PackedBf16Filters::pack(&spec, tiles, &bits);
            let mut back = vec![0u16; bits.len()];
            packed.bits_into(0, &mut back);
            assert_eq!(back, bits, "{spec:?}: read back");
            let from = bits.len() / 3;
            let mut tail = vec![0u16; bits.len() - from];
            packed.bits_into(from, &mut tail);
            assert_eq!(tail, bits[from..], "{spec:?}: read back from {from}");
        }
    }
}

#[test]
fn backend_packs_dense_filters_at_upload_and_keeps_them_read_only() {
    let Some(_) = kernel_available("bf16 backend upload_conv_filters") else { return };
    let f32k = CpuBackend::with_threads(2).expect("f32 backend");
    let spec = Conv1dSpec::new(1, 100, 64, 40, 3).dilation(2).pad(2);
    let (x, w, bias) = data(&spec, 31);
    let rounded: Vec<f32> = w.iter().map(|&v| from_bf16(to_bf16(v))).collect();
    let base = CpuBf16Backend::with_threads(2).expect("bf16 backend").with_bf16_dot_products(true);
    for kit in [base.clone(), base.clone().without_amx()] {
        let (xb, bb) = (kit.upload(&x).unwrap(), kit.upload(&bias).unwrap());
        let mut packed = kit.upload_conv_filters(&w, &spec).unwrap();
        let bits = kit.upload_weight(&w).unwrap();
        assert!(!packed.is_bf16() && bits.is_bf16(), "packed: held packed only");
        let run = |wt: &CpuBuf, spec: &Conv1dSpec, x: &CpuBuf| {
            let mut y = kit.alloc(spec.n_out() * spec.c_out).unwrap();
            kit.conv1d(spec, x, wt, Some(&bb), &mut y).map(|()| kit.download(&y).unwrap())
        };
        let (a, b) = (run(&packed, &spec, &xb).unwrap(), run(&bits, &spec, &xb).unwrap());
        assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "same filters, same kernel, same bits");
        assert_eq!(kit.download(&packed).unwrap(), rounded, "read back as the bf16 values");
        // Writes and fills are refused, the values left as they were.
        assert!(kit.write(&mut packed, 0, &[1.0]).is_err());
        assert!(kit.fill(&mut packed, 0, 4, 0.0).is_err());
        assert_eq!(kit.download(&packed).unwrap(), rounded, "untouched by the refused writes");
        // Another shape with as many values: the f32 convolution of those values.
        let other = Conv1dSpec::new(1, 50, 40, 64, 3).pad(1);
        let ox: Vec<f32> = (0..50 * 40).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        let ob = kit.upload(&ox).unwrap();
        let obias = kit.upload(&vec![0.0; 64]).unwrap();
        let mut y = kit.alloc(other.n_out() * 64).unwrap();
        kit.conv1d(&other, &ob, &packed, Some(&obias), &mut y).unwrap();
        let mut want = vec![0.0; other.n_out() * 64];
        f32k.conv1d(&other, &ox, &rounded, Some(&vec![0.0; 64]), &mut want).unwrap();
        assert_eq!(kit.download(&y).unwrap(), want, "another shape: f32 on the values");
        // Ops that read weights in f32 take it: a GEMM over its values.
        let per = spec.c_in * spec.kernel;
        let (a1, mut c) = (kit.upload(&vec![1.0; per]).unwrap(), kit.alloc(spec.c_out).unwrap());
        kit.gemm(&crate::GemmSpec::linear(1, per, spec.c_out), &a1, &packed, None, &mut c).unwrap();
        let sums: Vec<f32> = kit.download(&c).unwrap();
        let want_sums: Vec<f32> = rounded.chunks(per).map(|f| f.iter().sum()).collect();
        let close = sums.iter().zip(&want_sums).all(|(g, w)| (g - w).abs() <= 1e-4 * (1.0 + w.abs()));
        assert!(close, "gemm over the packed values: {sums:?} vs {want_sums:?}");
        // A short bank is not packed (uploaded as a plain bf16 weight) and conv1d refuses it.
        let short = kit.upload_conv_filters(&w[1..], &spec).unwrap();
        assert!(short.is_bf16());
        assert!(run(&short, &spec, &xb).is_err());
    }
    // Where the bf16 dot products do not run, the upload is upload_weight's.
    let plain = base.with_bf16_dot_products(false);
    assert!(plain.upload_conv_filters(&w, &spec).unwrap().is_bf16());
}
