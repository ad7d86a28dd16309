//! The Winograd convolution against an f64 direct convolution.
//!
//! Tolerance: relative L2 error over the whole output, 2e-6. Each output is rounded as a sum
//! of `c_in` products of transformed values whose terms are up to ~10× the plain ones (the
//! points ±2 and the factors 4, 5 and 8 of the transforms), so the error is a few f32 ulps
//! (2⁻²⁴ ≈ 6e-8) of those terms; measured 4–6e-7. The wrong variants are O(1) away.

use super::super::f64_reference::{check_against_f64, check_without_bias_twice};
use super::{computes, conv1d_in_chunks, conv1d_winograd, suits, OUT};
use crate::spec::{Conv1dSpec, PadMode};

const TOLERANCE: f64 = 2e-6;

fn check(spec: Conv1dSpec) {
    assert!(computes(&spec), "{spec:?} should be one the Winograd path computes");
    check_against_f64(spec, TOLERANCE, conv1d_winograd);
}

#[test]
fn matches_f64_for_kokoro_like_shapes() {
    // "Same" padding as Kokoro's resblocks (pad = d), every dilation they use, a length whose
    // last tile column is partial in every phase, and one whose last column holds a single row
    // (phases 1..d have no outputs there).
    for (c, dilation, n) in [(64, 1, 300), (64, 3, 400), (32, 5, 500), (96, 1, 16 * OUT + 3), (32, 5, 20 * OUT * 5 + 1)] {
        check(Conv1dSpec::new(1, n, c, c, 3).dilation(dilation).pad(dilation));
    }
}

#[test]
fn matches_f64_with_other_channel_counts_batches_and_padding() {
    // c_in ≠ c_out (odd ones too), two items, no padding and uneven padding.
    check(Conv1dSpec::new(2, 260, 48, 80, 3).pad(1));
    check(Conv1dSpec::new(1, 300, 33, 37, 3).dilation(2));
    check(Conv1dSpec::new(1, 400, 40, 32, 3).pad(2));
}

#[test]
fn runs_without_bias_and_leaves_no_stale_values() {
    check_without_bias_twice(Conv1dSpec::new(1, 333, 64, 64, 3).dilation(3).pad(3), TOLERANCE, conv1d_winograd);
}

#[test]
fn spans_several_chunks_and_gemm_tasks() {
    // 1,200 rows at dilation 3: 100 tile columns of 3 phases, 300 tiles, so each point's GEMM
    // splits into two tasks (256 tiles each); and with room for 13 columns per chunk, eight
    // chunks, the last partial; for each of two batch items.
    let spec = Conv1dSpec::new(2, 1200, 32, 32, 3).dilation(3).pad(3);
    assert!(suits(&spec), "a shape the dispatcher sends here");
    let per_column = 3 * 6 * (32 + 32);
    check_against_f64(spec, TOLERANCE, |s, x, w, b, y| conv1d_in_chunks(s, x, w, b, y, 13 * per_column));
}

#[test]
fn leaves_what_it_cannot_compute_to_the_other_paths() {
    let base = Conv1dSpec::new(1, 1100, 64, 64, 3).pad(1);
    assert!(suits(&base));
    assert!(!suits(&Conv1dSpec { kernel: 5, pad: 2, ..base }), "only 3 taps");
    assert!(!suits(&Conv1dSpec { stride: 2, ..base }));
    assert!(!suits(&Conv1dSpec { groups: 2, ..base }));
    assert!(!suits(&Conv1dSpec { c_in: 16, ..base }), "too narrow for the GEMM kernel");
    assert!(suits(&Conv1dSpec { c_in: 512, c_out: 512, ..base }));
    assert!(!suits(&Conv1dSpec { c_in: 1024, c_out: 1024, ..base }), "a 25 MB filter transform");
    assert!(!suits(&base.pad_mode(PadMode::Reflect)));
    assert!(!suits(&Conv1dSpec { n: 40, ..base }), "too few rows");
    assert!(!suits(&Conv1dSpec { n: 306, c_in: 512, c_out: 512, ..base }), "the filter transform would not pay");
}
