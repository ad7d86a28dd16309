//! The Winograd convolution against an f64 direct convolution.
//!
//! Tolerance: relative L2 error over the whole output, 2e-6. Each output is rounded as a sum
//! of `c_in` products of transformed values whose terms are up to ~10× the plain ones (the
//! points ±2 and the factors 4, 5 and 8 of the transforms), so the error is a few f32 ulps
//! (2⁻²⁴ ≈ 6e-8) of those terms; measured 4–6e-7. The wrong variants are O(1) away.

use super::super::f64_reference::{check_against_f64, check_fused_norm_conv, check_without_bias_twice, values};
use super::{
    chunk_input_rows, computes, conv1d_in_chunks, conv1d_winograd, most_chunk_input_rows, suits, Around, CHUNK_VALUES, OUT, POINTS,
};
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
    check_against_f64(spec, TOLERANCE, |s, x, w, b, y| conv1d_in_chunks(s, x, w, b, y, Around::default(), 13 * per_column));
}

/// With a row map and the residual add, chunk by chunk: the bits of mapping the input whole,
/// convolving it and adding the output, for chunks of one column, of 13 and of everything,
/// at every padding (the map is per batch item, so the wrong item's map shows too).
#[test]
fn maps_each_row_and_adds_with_the_bits_of_the_ops_apart() {
    let map = |b: usize, row: &[f32], out: &mut [f32]| {
        for (i, (o, &v)) in out.iter_mut().zip(row).enumerate() {
            *o = v * (1.5 + b as f32) + 0.01 * i as f32;
        }
    };
    for spec in [
        Conv1dSpec::new(2, 1200, 32, 40, 3).dilation(3).pad(3),
        Conv1dSpec::new(2, 301, 36, 32, 3).pad(2),
        Conv1dSpec::new(1, 260, 32, 32, 3).dilation(2),
    ] {
        let Conv1dSpec { batch, n, c_in, c_out, .. } = spec;
        let x = values(batch * n * c_in, 21);
        let w = values(c_out * c_in * 3, 22);
        let bias = values(c_out, 23);
        let y0 = values(batch * spec.n_out() * c_out, 24);
        let mut mapped = vec![0.0; x.len()];
        for (i, (row, out)) in x.chunks_exact(c_in).zip(mapped.chunks_exact_mut(c_in)).enumerate() {
            map(i / n, row, out);
        }
        let per_column = spec.dilation * POINTS * (c_in + c_out);
        for chunk in [per_column, 13 * per_column, CHUNK_VALUES] {
            let mut apart = vec![0.0; y0.len()];
            conv1d_in_chunks(&spec, &mapped, &w, Some(&bias), &mut apart, Around::default(), chunk);
            for accumulate in [false, true] {
                let want: Vec<u32> = if accumulate {
                    y0.iter().zip(&apart).map(|(y, o)| (y + o).to_bits()).collect()
                } else {
                    apart.iter().map(|v| v.to_bits()).collect()
                };
                let mut got = y0.clone();
                conv1d_in_chunks(&spec, &x, &w, Some(&bias), &mut got, Around { prep: Some(&map), accumulate }, chunk);
                let differ = got.iter().zip(&want).filter(|(g, w)| g.to_bits() != **w).count();
                assert_eq!(differ, 0, "{spec:?}, chunk {chunk}, accumulate {accumulate}: {differ} values differ");
            }
        }
    }
}

/// A chunk's mapped rows are exactly the input rows its tiles read: none missing (a tile would
/// read past them) and none extra (the scratch is sized from this).
#[test]
fn a_chunk_maps_exactly_the_rows_its_tiles_read() {
    for spec in [
        Conv1dSpec::new(1, 1200, 32, 32, 3).dilation(3).pad(3),
        Conv1dSpec::new(1, 301, 32, 32, 3).pad(2),
        Conv1dSpec::new(1, 260, 32, 32, 3).dilation(2),
        Conv1dSpec::new(1, 97, 32, 32, 3).dilation(5).pad(5),
    ] {
        let d = spec.dilation;
        let columns = spec.n_out().div_ceil(d).div_ceil(OUT);
        for (j0, j1) in [(0, 1), (0, columns), (1, 2), (columns / 2, columns), (columns - 1, columns)] {
            let read: Vec<usize> = (j0..j1)
                .flat_map(|j| (0..d).flat_map(move |r| (0..POINTS).map(move |t| r + d * (OUT * j + t))))
                .filter_map(|i| i.checked_sub(spec.pad).filter(|&i| i < spec.n))
                .collect();
            let (lo, hi) = (read.iter().min().copied().unwrap_or(0), read.iter().max().map_or(0, |m| m + 1));
            assert_eq!(chunk_input_rows(&spec, j0, j1), lo..hi, "{spec:?}, columns {j0}..{j1}");
            let most = most_chunk_input_rows(&spec, j1 - j0);
            assert!(hi - lo <= most, "{spec:?}: {} rows past the scratch's {most}", hi - lo);
        }
    }
}

/// The f32 backend's instance norm + Snake + 3-tap convolution (+ residual) runs here fused: the
/// same bits as the ops apart, neither the input nor the scratch written.
#[test]
fn the_f32_backend_fuses_norm_snake_and_residual_into_this_path() {
    let conv = Conv1dSpec::new(2, 1100, 32, 32, 3).dilation(3).pad(3);
    assert!(suits(&conv));
    check_fused_norm_conv(conv);
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
