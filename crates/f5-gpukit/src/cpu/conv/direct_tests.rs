//! The direct f32 dense convolution against an f64 convolution, and against the im2col path.
//!
//! Tolerance: each output is a sum of `K·c_in` f32 products (each an FMA: one rounding) plus
//! the bias, so it lies within `γ · Σ|terms|` of the exact sum, `γ = (K·c_in + 2)·2⁻²⁴` (the
//! classic bound for recursive summation, products included). The im2col path obeys the same
//! bound, so the two differ by at most twice it. Wrong variants (taps one row off, padding taps
//! reading the edge row, the bias left out) must break the f64 bound. The transposed
//! convolution's phases are held to the same bound (`K·c_in` products at most per output);
//! there the wrong variants are the taps taken in reverse order and the bias left out.
//!
//! Every kernel form the CPU runs is tested: AVX-512 where present, and AVX2 (which every
//! AVX-512 CPU has too); where both run, the AVX2 form must give the AVX-512 form's bits.

use super::super::f64_reference::values;
use super::{applies, conv1d_dense, conv_transpose1d_dense, merged_taps, Isa, TransposedFilters, MR};
use crate::cpu::conv::{grouped, tap_offsets, transpose_by_gemm};
use crate::cpu::simd::{Avx2Fma, Avx512F};
use crate::spec::{Conv1dSpec, ConvTranspose1dSpec, PadMode};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    Exact,
    /// Wrong: each tap reads one input row further on.
    TapOffByOne,
    /// Wrong: taps on zero padding read the nearest edge row instead.
    PaddingReplicated,
    /// Wrong: the bias left out.
    NoBias,
}

/// `(y, Σ|terms|)` in f64: the convolution as a variant computes it, and the magnitudes.
fn conv_f64(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: &[f32], variant: Variant) -> (Vec<f64>, Vec<f64>) {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, stride, dilation, pad, .. } = *spec;
    let n_out = spec.n_out();
    let shift = usize::from(variant == Variant::TapOffByOne);
    let pad_mode = if variant == Variant::PaddingReplicated { PadMode::Replicate } else { spec.pad_mode };
    let (mut y, mut mag) = (vec![0.0f64; batch * n_out * c_out], vec![0.0f64; batch * n_out * c_out]);
    for b in 0..batch {
        for t in 0..n_out {
            for co in 0..c_out {
                let mut acc = if variant == Variant::NoBias { 0.0 } else { bias[co] as f64 };
                let mut m = (bias[co] as f64).abs();
                for k in 0..kernel {
                    let Some(s) = pad_mode.source(t * stride + k * dilation + shift, pad, n) else { continue };
                    for ci in 0..c_in {
                        let p = x[(b * n + s) * c_in + ci] as f64 * w[(co * c_in + ci) * kernel + k] as f64;
                        acc += p;
                        m += p.abs();
                    }
                }
                y[(b * n_out + t) * c_out + co] = acc;
                mag[(b * n_out + t) * c_out + co] = m;
            }
        }
    }
    (y, mag)
}

fn violations(got: &[f32], want: &[f64], mag: &[f64], rel: f64) -> usize {
    // An output never written (NaN, as the tests fill `y`) counts too.
    got.iter().zip(want).zip(mag).filter(|((&g, &w), &m)| g.is_nan() || (g as f64 - w).abs() > rel * m + 1e-30).count()
}

/// (batch, n, c_in, c_out, kernel, stride, dilation, pad): batch > 1 and odd `c_in`; dilation
/// 1 with `c_in` a whole cache line (tiles whose taps merge into one run) and a 20-wide last
/// filter panel; dilations 2 and 5 with padding at both ends; stride 2, merged and not; reflect
/// padding; 512 channels (a padded copy stride, never merged); 1030 channels (row blocks cut by
/// the copy's size); fewer rows than one tile.
fn shapes() -> Vec<Conv1dSpec> {
    let s = |batch, n, c_in, c_out, kernel, stride, dilation, pad| {
        Conv1dSpec::new(batch, n, c_in, c_out, kernel).stride(stride).dilation(dilation).pad(pad)
    };
    vec![
        s(2, 37, 5, 7, 3, 1, 1, 1),
        s(1, 50, 16, 52, 7, 1, 1, 3),
        s(1, 100, 33, 3, 11, 1, 5, 25),
        s(1, 29, 8, 8, 4, 2, 2, 3),
        s(1, 61, 32, 9, 3, 2, 1, 1),
        s(1, 40, 6, 9, 5, 1, 1, 2).pad_mode(PadMode::Reflect),
        s(1, 90, 512, 6, 3, 1, 1, 1),
        s(1, 300, 1030, 4, 3, 1, 2, 2),
        s(1, 5, 3, 2, 3, 1, 1, 0),
    ]
}

fn run(isa: Isa, spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: &[f32], threads: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("test pool");
    pool.install(|| conv1d_dense(isa, spec, x, w, Some(bias), &mut y));
    y
}

fn run_transposed(isa: Isa, spec: &ConvTranspose1dSpec, x: &[f32], w: &[f32], bias: &[f32], threads: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("test pool");
    pool.install(|| conv_transpose1d_dense(isa, spec, x, TransposedFilters::F32(w), Some(bias), &mut y));
    y
}

#[test]
fn direct_conv_is_within_the_f32_bound_of_the_f64_conv_and_wrong_variants_are_not() {
    for (isa, (i, spec)) in Isa::every().into_iter().flat_map(|isa| shapes().into_iter().enumerate().map(move |s| (isa, s))) {
        let x = values(spec.batch * spec.n * spec.c_in, 10 + i as u64);
        let w = values(spec.c_out * spec.c_in * spec.kernel, 20 + i as u64);
        let bias = values(spec.c_out, 30 + i as u64);
        let rel = (spec.kernel * spec.c_in + 2) as f64 * 2f64.powi(-24);
        let got = run(isa, &spec, &x, &w, &bias, 3);
        let (want, mag) = conv_f64(&spec, &x, &w, &bias, Variant::Exact);
        assert_eq!(violations(&got, &want, &mag, rel), 0, "{isa:?} {spec:?}: outputs outside the f32 bound");
        // Each output's sum order does not depend on the blocking: one thread gives the same bits.
        assert!(
            run(isa, &spec, &x, &w, &bias, 1).iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{spec:?}: thread count changed the result"
        );
        let mut wrongs = vec![Variant::TapOffByOne, Variant::NoBias];
        if spec.pad > 0 && spec.pad_mode == PadMode::Zeros {
            wrongs.push(Variant::PaddingReplicated);
        }
        for wrong in wrongs {
            let (bad, _) = conv_f64(&spec, &x, &w, &bias, wrong);
            assert!(violations(&got, &bad, &mag, rel) > 0, "{spec:?}: the {wrong:?} variant passed the bound");
        }
        // The im2col + gemm path obeys the same bound: the two agree within twice it.
        let mut im2col = vec![f32::NAN; got.len()];
        grouped(&spec, &x, &w, Some(&bias), &mut im2col);
        let got64: Vec<f64> = got.iter().map(|&v| v as f64).collect();
        assert_eq!(violations(&im2col, &got64, &mag, 2.0 * rel), 0, "{spec:?}: direct and im2col paths disagree");
    }
}

#[test]
fn taps_merge_only_where_each_row_reads_consecutive_rows_of_the_copy() {
    let offsets_of = |spec: &Conv1dSpec, t0: usize, row_len: usize| {
        let mut offsets = vec![0; spec.kernel * MR];
        tap_offsets(spec, t0, MR, MR, 0, row_len, 1 << 20, &mut offsets);
        offsets
    };
    let d1 = Conv1dSpec::new(1, 100, 16, 4, 3).pad(1);
    // Interior tile, copy stride = channels: one run.
    assert!(merged_taps(&offsets_of(&d1, 12, 16), MR, 16, 16));
    // A padded copy stride leaves a gap between taps.
    assert!(!merged_taps(&offsets_of(&d1, 12, 32), MR, 16, 32));
    // The first tile's first row reads padding (the zero row) at tap 0.
    assert!(!merged_taps(&offsets_of(&d1, 0, 16), MR, 16, 16));
    // Dilation 2 skips a row between taps.
    let d2 = Conv1dSpec::new(1, 100, 16, 4, 3).dilation(2).pad(2);
    assert!(!merged_taps(&offsets_of(&d2, 12, 16), MR, 16, 16));
}

/// `(y, Σ|terms|)` in f64 for a dense transposed convolution (filters `[c_in, c_out, K]`);
/// `reversed` takes tap `K − 1 − k` where tap `k` belongs, `bias_on` false leaves the bias out.
fn transpose_f64(spec: &ConvTranspose1dSpec, x: &[f32], w: &[f32], bias: &[f32], reversed: bool, bias_on: bool) -> (Vec<f64>, Vec<f64>) {
    let ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, stride, pad, .. } = *spec;
    let n_out = spec.n_out();
    let mut y = vec![0.0f64; batch * n_out * c_out];
    let mut mag = vec![0.0f64; batch * n_out * c_out];
    for b in 0..batch {
        for o in 0..n_out {
            for (co, &bv) in bias.iter().enumerate().take(c_out) {
                let at = (b * n_out + o) * c_out + co;
                y[at] = if bias_on { bv as f64 } else { 0.0 };
                mag[at] = (bv as f64).abs();
            }
        }
        for i in 0..n {
            for k in 0..kernel {
                let Some(o) = (i * stride + k).checked_sub(pad).filter(|&o| o < n_out) else { continue };
                let kw = if reversed { kernel - 1 - k } else { k };
                for ci in 0..c_in {
                    let xv = x[(b * n + i) * c_in + ci] as f64;
                    for co in 0..c_out {
                        let p = xv * w[(ci * c_out + co) * kernel + kw] as f64;
                        y[(b * n_out + o) * c_out + co] += p;
                        mag[(b * n_out + o) * c_out + co] += p.abs();
                    }
                }
            }
        }
    }
    (y, mag)
}

/// Kokoro's two upsamplers' kernel/stride/padding (k20 s10 p5 with 40 output channels: two
/// filter panels, the last 8 wide, and several row blocks; k12 s6 p3 with 512 input
/// channels: the padded copy stride), a kernel shorter than the stride with output padding
/// (phases no tap reaches), stride 1 (one phase, merged taps) over two items, one input row.
fn transposed_shapes() -> Vec<ConvTranspose1dSpec> {
    vec![
        ConvTranspose1dSpec::new(1, 60, 16, 40, 20, 10).pad(5),
        ConvTranspose1dSpec::new(1, 23, 512, 8, 12, 6).pad(3),
        ConvTranspose1dSpec::new(1, 13, 4, 5, 2, 3).output_padding(2),
        ConvTranspose1dSpec::new(2, 30, 16, 3, 4, 1).pad(1),
        ConvTranspose1dSpec::new(1, 1, 3, 2, 5, 2).pad(1),
    ]
}

#[test]
fn direct_transposed_conv_is_within_the_f32_bound_and_wrong_variants_are_not() {
    for (isa, (i, spec)) in Isa::every().into_iter().flat_map(|isa| transposed_shapes().into_iter().enumerate().map(move |s| (isa, s))) {
        let x = values(spec.batch * spec.n * spec.c_in, 40 + i as u64);
        let w = values(spec.c_in * spec.c_out * spec.kernel, 50 + i as u64);
        let bias = values(spec.c_out, 60 + i as u64);
        let rel = (spec.kernel * spec.c_in + 2) as f64 * 2f64.powi(-24);
        let len = spec.batch * spec.n_out() * spec.c_out;
        let run = |threads: usize| run_transposed(isa, &spec, &x, &w, &bias, threads);
        let got = run(3);
        let (want, mag) = transpose_f64(&spec, &x, &w, &bias, false, true);
        assert_eq!(violations(&got, &want, &mag, rel), 0, "{isa:?} {spec:?}: outputs outside the f32 bound");
        assert!(run(1).iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "{spec:?}: thread count changed the result");
        if spec.kernel > 1 {
            let (bad, _) = transpose_f64(&spec, &x, &w, &bias, true, true);
            assert!(violations(&got, &bad, &mag, rel) > 0, "{spec:?}: taps in reverse passed the bound");
        }
        let (bad, _) = transpose_f64(&spec, &x, &w, &bias, false, false);
        assert!(violations(&got, &bad, &mag, rel) > 0, "{spec:?}: the bias left out passed the bound");
        // The GEMM + col2im path obeys the same bound: the two agree within twice it.
        let mut by_gemm: Vec<f32> = (0..len).map(|j| bias[j % spec.c_out]).collect();
        transpose_by_gemm(&spec, &x, &w, &mut by_gemm);
        let got64: Vec<f64> = got.iter().map(|&v| v as f64).collect();
        assert_eq!(violations(&by_gemm, &got64, &mag, 2.0 * rel), 0, "{spec:?}: direct and GEMM paths disagree");
    }
}

/// The AVX2 form of the tile kernel gives the AVX-512 form's bits, plain and transposed, on
/// every test shape: the same products summed in the same order. Needs an AVX-512 CPU.
#[test]
fn the_avx2_tile_kernel_gives_the_avx512_bits() {
    let (Some(wide), Some(narrow)) = (Avx512F::detect(), Avx2Fma::detect()) else {
        println!("skipped: comparing the two forms needs an AVX-512 CPU");
        return;
    };
    let (wide, narrow) = (Isa::Avx512(wide), Isa::Avx2(narrow));
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for (i, spec) in shapes().into_iter().enumerate() {
        let x = values(spec.batch * spec.n * spec.c_in, 10 + i as u64);
        let w = values(spec.c_out * spec.c_in * spec.kernel, 20 + i as u64);
        let bias = values(spec.c_out, 30 + i as u64);
        assert_eq!(bits(&run(narrow, &spec, &x, &w, &bias, 2)), bits(&run(wide, &spec, &x, &w, &bias, 2)), "{spec:?}");
    }
    for (i, spec) in transposed_shapes().into_iter().enumerate() {
        let x = values(spec.batch * spec.n * spec.c_in, 40 + i as u64);
        let w = values(spec.c_in * spec.c_out * spec.kernel, 50 + i as u64);
        let bias = values(spec.c_out, 60 + i as u64);
        let (a, b) = (run_transposed(narrow, &spec, &x, &w, &bias, 2), run_transposed(wide, &spec, &x, &w, &bias, 2));
        assert_eq!(bits(&a), bits(&b), "{spec:?}");
    }
}

/// AVX-512 takes every dense convolution; AVX2 none with fewer than 32 input or 16 output
/// channels (Kokoro's 22-row source spectrum, its one-channel F0/N projections), and the rest.
#[test]
fn the_avx2_kernel_leaves_narrow_convolutions_to_the_im2col_path() {
    if let Some(cpu) = Avx512F::detect() {
        assert!(applies(Isa::Avx512(cpu), 22, 128) && applies(Isa::Avx512(cpu), 256, 1));
    }
    let Some(cpu) = Avx2Fma::detect() else {
        println!("skipped: this CPU lacks AVX2 + FMA");
        return;
    };
    let avx2 = Isa::Avx2(cpu);
    assert!(!applies(avx2, 22, 128) && !applies(avx2, 22, 256) && !applies(avx2, 256, 1) && !applies(avx2, 31, 64));
    assert!(applies(avx2, 32, 16) && applies(avx2, 128, 22) && applies(avx2, 1024, 1024) && applies(avx2, 512, 256));
}
