//! The FFT convolution against an f64 direct convolution.
//!
//! Tolerance: relative L2 error over the whole output, 2e-6. The FFT's roundings are relative to
//! a tile's norm, not to each output's terms, so a per-output bound like the direct kernel's
//! does not hold; over a signal each of the 2 × 6 butterfly stages and the per-bin sums of
//! `2·c_in` products add errors of a few f32 ulps (2⁻²⁴ ≈ 6e-8) of the norm, measured 2–3e-7.
//! The wrong variants (taps reversed: a convolution instead of a correlation; taps one row off;
//! the dilation ignored; the bias left out) are O(1) away. Gauss's three products per bin add a
//! rounding to each operand: measured 2.1–2.9e-7, against 1.8–2.3e-7 with the schoolbook four.

use super::super::f64_reference::{check_against_f64, check_fused_norm_conv, check_without_bias_twice, values};
use super::{
    chunk_values, conv1d_fft, conv1d_in_chunks, suits, transpose_taps, transpose_taps_portable, Around, FilterSpectrum, BINS, CHUNK_VALUES,
    MIN_CHUNK_TILES, PARTS, TILE,
};
use crate::spec::{Conv1dSpec, PadMode};

const TOLERANCE: f64 = 2e-6;

fn check(spec: Conv1dSpec) {
    assert!(suits(&spec), "{spec:?} should take the FFT path");
    check_against_f64(spec, TOLERANCE, conv1d_fft);
}

#[test]
fn matches_f64_for_kokoro_like_shapes() {
    // "Same" padding as Kokoro's resblocks: pad = d·(K − 1) / 2.
    // The last case's last tile column holds one output row (58 per phase and column at k7).
    for (c, kernel, dilation, n) in
        [(64, 7, 1, 300), (64, 11, 3, 400), (32, 7, 5, 500), (96, 11, 1, 2 * TILE + 17), (32, 7, 5, 2 * 58 * 5 + 1)]
    {
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
    check_without_bias_twice(Conv1dSpec::new(1, 333, 64, 64, 7).dilation(3).pad(9), TOLERANCE, conv1d_fft);
}

#[test]
fn spans_several_chunks() {
    // 1,000 rows at dilation 3, k7: 58 outputs per phase and tile, 6 tile columns of 3 phases;
    // with room for 2 columns per chunk, three chunks, for each of two batch items.
    let spec = Conv1dSpec::new(2, 1000, 32, 32, 7).dilation(3).pad(9);
    let per_column = 3 * BINS * PARTS * (32 + 32);
    let each = |s: &Conv1dSpec, x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32]| {
        conv1d_in_chunks(s, x, w, b, y, Around::default(), 2 * per_column, FilterSpectrum::PerBinOnOneChunk)
    };
    check_against_f64(spec, TOLERANCE, each);
}

/// On a single chunk the filters' spectrum is made bin by bin, each just before its bin's
/// products: the same values as made whole, so the same bits, plain and through the fused
/// residual step, on one chunk; and the bin-by-bin path against the f64 sum on its own.
#[test]
fn a_single_chunk_makes_the_filter_spectrum_bin_by_bin_with_the_same_bits() {
    let spec = Conv1dSpec::new(1, 400, 64, 48, 11).dilation(3).pad(15);
    let x = values(spec.n * spec.c_in, 1);
    let w = values(spec.c_out * spec.c_in * spec.kernel, 2);
    let bias = values(spec.c_out, 3);
    let run = |spectrum: FilterSpectrum, accumulate: bool| {
        let mut y = values(spec.n_out() * spec.c_out, 4);
        let around = Around { prep: None, accumulate };
        conv1d_in_chunks(&spec, &x, &w, Some(&bias), &mut y, around, usize::MAX, spectrum);
        y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    };
    for accumulate in [false, true] {
        let whole = run(FilterSpectrum::Whole, accumulate);
        assert!(run(FilterSpectrum::PerBinOnOneChunk, accumulate) == whole, "accumulate {accumulate}");
    }
    let per_bin = |s: &Conv1dSpec, x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32]| {
        conv1d_in_chunks(s, x, w, b, y, Around::default(), usize::MAX, FilterSpectrum::PerBinOnOneChunk)
    };
    check_against_f64(spec, TOLERANCE, per_bin);
    check_against_f64(Conv1dSpec::new(1, 300, 34, 36, 5).dilation(2), TOLERANCE, per_bin);
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
    assert!(!suits(&Conv1dSpec { c_in: 512, c_out: 512, kernel: 5, pad: 2, ..base }), "a 104 MB filter spectrum");
    assert!(!suits(&base.pad_mode(PadMode::Reflect)));
    assert!(!suits(&Conv1dSpec { n: 40, ..base }), "too few rows for one tile");
}

/// The f32 backend's instance norm + Snake + convolution (+ residual) runs here fused: the same
/// bits as the ops apart, neither the input nor the scratch written.
#[test]
fn the_f32_backend_fuses_norm_snake_and_residual_into_this_path() {
    let conv = Conv1dSpec::new(2, 300, 64, 64, 7).dilation(3).pad(9);
    assert!(suits(&conv));
    check_fused_norm_conv(conv);
}

/// A chunk holds at least `MIN_CHUNK_TILES` tiles (Kokoro's 256-channel convolutions: twice the
/// 16 MB budget) and never less than `CHUNK_VALUES` (its 128-channel ones keep the budget).
#[test]
fn a_chunk_holds_the_fewest_tiles_that_amortise_the_filter_spectrum() {
    let per_tile = |c: usize| BINS * PARTS * 2 * c;
    let wide = Conv1dSpec::new(1, 30_000, 256, 256, 7).pad(3);
    assert!(chunk_values(&wide) / per_tile(256) >= MIN_CHUNK_TILES && chunk_values(&wide) > CHUNK_VALUES);
    let narrow = Conv1dSpec::new(1, 30_000, 128, 128, 11).pad(5);
    assert_eq!(chunk_values(&narrow), CHUNK_VALUES);
    assert!(CHUNK_VALUES / per_tile(128) >= MIN_CHUNK_TILES);
}

/// The filters' transpose (AVX2 in 8 × 8 register blocks where the CPU has it, else value by
/// value) puts every value where its definition says, edges included: channel counts and runs
/// that are and are not multiples of 8, filters longer than the run read.
#[test]
fn the_taps_transpose_puts_every_value_in_place() {
    for (c_out, run, stride) in [(16, 176, 176), (48, 112, 1232), (13, 21, 40), (7, 5, 5), (24, 8, 33), (1, 1, 1)] {
        let w = values((c_out - 1) * stride + run, 9);
        let want: Vec<f32> = (0..run * c_out).map(|at| w[(at % c_out) * stride + at / c_out]).collect();
        let mut got = vec![f32::NAN; run * c_out];
        transpose_taps(&w, stride, run, &mut got);
        assert!(got.iter().zip(&want).all(|(g, v)| g.to_bits() == v.to_bits()), "{c_out} × {run}, stride {stride}");
        let mut portable = vec![f32::NAN; run * c_out];
        transpose_taps_portable(&w, stride, run, c_out, &mut portable);
        assert!(portable.iter().zip(&want).all(|(g, v)| g.to_bits() == v.to_bits()), "{c_out} × {run}, stride {stride}");
    }
}
