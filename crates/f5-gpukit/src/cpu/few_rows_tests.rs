use super::{applies, broadcast_k_block, gemm, k_block, Isa, AVX2_MAX_ROWS, BROADCAST_MIN_ROWS, MAX_ROWS, NR, SUB_K};
use crate::cpu::simd::{Avx2Fma, Avx512F};
use crate::spec::{GemmSpec, MatLayout};

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// C = beta·C + A·B in f64, and Σ|a·b| per element (the scale of the f32 rounding error).
fn reference(spec: &GemmSpec, a: &[f32], b: &[f32], c: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut mag) = (c.iter().map(|&x| x as f64).collect::<Vec<_>>(), vec![0.0; c.len()]);
    for i in 0..spec.m {
        for j in 0..spec.n {
            let idx = spec.c.offset + i * spec.c.row_stride + j * spec.c.col_stride;
            let (mut s, mut m) = (0.0f64, 0.0f64);
            for q in 0..spec.k {
                let x = a[spec.a.offset + i * spec.a.row_stride + q * spec.a.col_stride] as f64;
                let w = b[spec.b.offset + q * spec.b.row_stride + j * spec.b.col_stride] as f64;
                s += x * w;
                m += (x * w).abs();
            }
            out[idx] = if spec.beta == 0.0 { s } else { out[idx] + s };
            mag[idx] = m + if spec.beta == 0.0 { 0.0 } else { c[idx].abs() as f64 };
        }
    }
    (out, mag)
}

/// f32 rounding bound for one output, u = 2⁻²⁴, for the kernel `spec.m` selects. Lane sums:
/// each lane sums ≤ kc/16 + 1 terms, 4 tree levels reduce the lanes, and each k block adds
/// one more rounding: (k/16 + 6 + blocks)·u·Σ|a·b|. Broadcast: ≤ SUB_K serial products, then
/// ≤ kc/SUB_K additions of those partial sums per k block, and one per k block into C:
/// (SUB_K + kc/SUB_K + 2 + blocks)·u·Σ|a·b|.
fn bound(spec: &GemmSpec, mag: f64) -> f64 {
    let kc = if spec.m >= BROADCAST_MIN_ROWS { broadcast_k_block(spec.k) } else { k_block(spec.m, spec.k) };
    let blocks = spec.k.div_ceil(kc) as f64;
    let chain =
        if spec.m >= BROADCAST_MIN_ROWS { (SUB_K + kc.div_ceil(SUB_K) + 2) as f64 + blocks } else { spec.k as f64 / 16.0 + 6.0 + blocks };
    chain * (1.0 / (1u64 << 24) as f64) * mag + 1e-30
}

fn run(isa: Isa, spec: &GemmSpec, a: &[f32], b: &[f32], c0: &[f32], threads: usize) -> Vec<f32> {
    let mut c = c0.to_vec();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    pool.install(|| gemm(isa, spec, a, b, &mut c));
    c
}

/// A Linear-shaped product (A `[m, k]` rows `lda` apart, B = Wᵀ of `W [n, k]`, C rows `ldc`
/// apart) with offsets, so strides and offsets are exercised too.
fn linear_spec(m: usize, n: usize, k: usize, lda: usize, ldc: usize, beta: f32) -> GemmSpec {
    GemmSpec {
        m,
        n,
        k,
        batch: 1,
        a: MatLayout { offset: 3, ..MatLayout::row_major(lda) },
        b: MatLayout { offset: 5, ..MatLayout::transposed(k) },
        c: MatLayout { offset: 7, ..MatLayout::row_major(ldc) },
        beta,
    }
}

fn operands(spec: &GemmSpec, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let a = values(spec.a.offset + spec.m * spec.a.row_stride, seed);
    let b = values(spec.b.offset + spec.n * spec.b.col_stride, seed + 1);
    let c = values(spec.c.offset + spec.m * spec.c.row_stride, seed + 2);
    (a, b, c)
}

#[test]
fn matches_f64_within_the_rounding_bound_on_every_edge() {
    // Rows: 1, a partial tile, whole tiles, the last row count of the lane kernel and the
    // first of the broadcast one, a panel and one row, ALBERT's 58, the limit. Columns: under
    // one panel, one panel, a partial panel past a whole block. k: one vector, a tail, one
    // sub-block and one step, a Linear's, and one long enough at MAX_ROWS rows to be cut
    // into k blocks.
    let shapes = [
        (1, 1, 16),
        (3, 5, 17),
        (4, 6, 31),
        (5, 7, 768),
        (BROADCAST_MIN_ROWS - 1, 7, 100),
        (BROADCAST_MIN_ROWS, 13, SUB_K + 1),
        (33, 8 * 12 + 1, 130),
        (58, 2 * 16 * NR + 5, 128),
        (58, 200, 2048),
        (MAX_ROWS, 13, 1000),
    ];
    assert!(k_block(MAX_ROWS, 1000) < 1000, "the last shape must take more than one k block");
    assert!(broadcast_k_block(2048) < 2048, "58 × 2048 must take more than one k block");
    for isa in Isa::every() {
        for (case, &(m, n, k)) in shapes.iter().enumerate() {
            for beta in [0.0, 1.0] {
                let spec = linear_spec(m, n, k, k + 2, n + 3, beta);
                if !applies(isa, &spec) {
                    let outside_avx2 = !(BROADCAST_MIN_ROWS..=AVX2_MAX_ROWS).contains(&m);
                    assert!(matches!(isa, Isa::Avx2(_)) && outside_avx2, "{isa:?} must take m{m} n{n} k{k}");
                    continue;
                }
                let (a, b, c0) = operands(&spec, 11 * case as u64 + beta as u64);
                let (want, mag) = reference(&spec, &a, &b, &c0);
                let got = run(isa, &spec, &a, &b, &c0, 2);
                for (idx, (&g, (&w, &mg))) in got.iter().zip(want.iter().zip(&mag)).enumerate() {
                    let err = (g as f64 - w).abs();
                    assert!(err <= bound(&spec, mg), "{isa:?} m{m} n{n} k{k} beta{beta}: C[{idx}] = {g}, f64 {w} (error {err:e})");
                }
            }
        }
    }
}

#[test]
fn the_bound_catches_a_dropped_product() {
    // The tolerance above is tight enough, for either kernel, to see one missing term of
    // k = 17 (the lane kernel's tail lane; a step of the broadcast one): the sum without it is
    // outside the bound for a typical element.
    for m in [3, BROADCAST_MIN_ROWS + 6] {
        let spec = linear_spec(m, 5, 17, 17, 5, 0.0);
        let (a, b, c0) = operands(&spec, 3);
        let (want, mag) = reference(&spec, &a, &b, &c0);
        let mut caught = 0;
        for i in 0..spec.m {
            for j in 0..spec.n {
                let idx = spec.c.offset + i * spec.c.row_stride + j;
                let last = a[spec.a.offset + i * spec.a.row_stride + 16] as f64 * b[spec.b.offset + j * spec.b.col_stride + 16] as f64;
                let without_tail = (want[idx] - last) as f32 as f64;
                caught += usize::from((without_tail - want[idx]).abs() > bound(&spec, mag[idx]));
            }
        }
        assert!(caught >= spec.m * spec.n - 2, "m{m}: only {caught} of {} outputs would catch a dropped term", spec.m * spec.n);
    }
}

#[test]
fn bits_do_not_depend_on_the_thread_count() {
    for isa in Isa::every() {
        for &(m, n, k) in &[(BROADCAST_MIN_ROWS - 1, 500, 300), (58, 2304, 768), (MAX_ROWS, 300, 1000)] {
            let spec = linear_spec(m, n, k, k, n, 0.0);
            if !applies(isa, &spec) {
                continue;
            }
            let (a, b, c0) = operands(&spec, 7);
            let one = run(isa, &spec, &a, &b, &c0, 1);
            for threads in [2, 3] {
                assert!(run(isa, &spec, &a, &b, &c0, threads) == one, "{isa:?} m{m} n{n} k{k}: {threads} threads differ from one");
            }
        }
    }
}

/// The AVX2 form of the broadcast kernel sums every output's products in the AVX-512 form's
/// order, so the two give the same bits (a model's output does not depend on which of the two
/// the CPU has). Runs where both are present, on every column count of the tile and both halves
/// of a panel, with k blocks cut and C accumulated.
#[test]
fn the_avx2_broadcast_kernel_gives_the_avx512_bits() {
    let (Some(wide), Some(narrow)) = (Avx512F::detect(), Avx2Fma::detect()) else {
        eprintln!("skipped: this CPU lacks AVX-512 F or AVX2, so there is no second form to compare");
        return;
    };
    for &(m, n, k, beta) in &[(BROADCAST_MIN_ROWS, 12 * 4 + 11, 130, 0.0), (58, 200, 2048, 1.0), (AVX2_MAX_ROWS, 37, 1000, 0.0)] {
        let spec = linear_spec(m, n, k, k + 1, n, beta);
        let (a, b, c0) = operands(&spec, 5);
        let want = run(Isa::Avx512(wide), &spec, &a, &b, &c0, 2);
        assert!(run(Isa::Avx2(narrow), &spec, &a, &b, &c0, 2) == want, "m{m} n{n} k{k}: AVX2 and AVX-512 differ");
    }
}

#[test]
fn takes_only_few_row_products_with_k_contiguous_operands() {
    for isa in Isa::every() {
        let linear = GemmSpec::linear(58, 768, 2304);
        assert!(applies(isa, &linear));
        assert!(!applies(isa, &GemmSpec::linear(MAX_ROWS + 1, 768, 2304)), "too many rows");
        assert!(!applies(isa, &GemmSpec::linear(58, 15, 64)), "k under one vector");
        assert!(!applies(isa, &GemmSpec { batch: 2, ..linear }), "batched");
        assert!(!applies(isa, &GemmSpec { b: MatLayout::row_major(2304), ..linear }), "B row-major: its columns are strided");
        assert!(!applies(isa, &GemmSpec { a: MatLayout::transposed(58), ..linear }), "A column-major");
        assert!(!applies(isa, &GemmSpec { c: MatLayout::row_major(100), ..linear }), "C rows overlap");
        let few = GemmSpec::linear(BROADCAST_MIN_ROWS - 1, 768, 2304);
        assert_eq!(
            applies(isa, &few),
            matches!(isa, Isa::Avx512(_)),
            "{isa:?}: only AVX-512 has the lane-sum kernel for under {BROADCAST_MIN_ROWS} rows"
        );
        assert!(applies(isa, &GemmSpec::linear(AVX2_MAX_ROWS, 768, 2304)), "{isa:?}: two panels");
        let three_panels = GemmSpec::linear(AVX2_MAX_ROWS + 1, 768, 2304);
        assert_eq!(
            applies(isa, &three_panels),
            matches!(isa, Isa::Avx512(_)),
            "{isa:?}: past two panels only AVX-512 beats the gemm crate"
        );
    }
}

/// The few-row convolution against the f64 convolution. Tolerance 2e-6 rel-L2: each output sums
/// `c_in·K` products in chains of at most `SUB_K + kc/SUB_K` roundings, ~1e-7 relative for
/// these sums (measured 1–2e-7); every wrong variant (taps reversed, one row off, dilation
/// ignored, bias dropped) lands over 100× further.
mod conv {
    use super::super::{broadcast_k_block, conv1d, conv_applies, Isa, MAX_CONV_ROWS};
    use crate::cpu::conv::f64_reference::{check_against_f64, check_without_bias_twice, conv_f64, rel_l2, values, Variant};
    use crate::spec::{Conv1dSpec, PadMode};

    const TOLERANCE: f64 = 2e-6;

    /// (batch, n, c_in, c_out, kernel, stride, dilation, pad): two batch items; a partial
    /// panel with a partial last column block; dilation 5 with padding at both ends; stride 2;
    /// no padding; `c_in·K` long enough at the most rows to be cut into k blocks.
    fn shapes() -> Vec<Conv1dSpec> {
        let s = |batch, n, c_in, c_out, kernel, stride, dilation, pad| {
            Conv1dSpec::new(batch, n, c_in, c_out, kernel).stride(stride).dilation(dilation).pad(pad)
        };
        vec![
            s(2, 37, 6, 40, 3, 1, 1, 1),
            s(1, 150, 64, 161, 3, 1, 1, 1),
            s(1, 100, 33, 113, 11, 1, 5, 25),
            s(1, 61, 32, 39, 3, 2, 1, 1),
            s(1, 60, 20, 56, 5, 1, 1, 0),
            s(1, MAX_CONV_ROWS, 600, MAX_CONV_ROWS, 3, 1, 1, 1),
        ]
    }

    #[test]
    fn matches_f64_and_not_the_wrong_variants() {
        let last = *shapes().last().expect("shapes");
        assert!(broadcast_k_block(last.c_in * last.kernel) < last.c_in * last.kernel, "the last shape must take more than one k block");
        for isa in Isa::every() {
            for spec in shapes() {
                assert!(conv_applies(isa, &spec), "{spec:?} must be a few-row convolution on {isa:?}");
                check_against_f64(spec, TOLERANCE, |s, x, w, b, y| conv1d(isa, s, x, w, b, y));
                check_without_bias_twice(spec, TOLERANCE, |s, x, w, b, y| conv1d(isa, s, x, w, b, y));
            }
        }
    }

    #[test]
    fn bits_do_not_depend_on_the_thread_count() {
        let spec = Conv1dSpec::new(1, 153, 200, 300, 3).pad(1);
        let (x, w, bias) = (values(153 * 200, 1), values(300 * 200 * 3, 2), values(300, 3));
        let run = |isa, threads| {
            let mut y = vec![f32::NAN; 153 * 300];
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
            pool.install(|| conv1d(isa, &spec, &x, &w, Some(&bias), &mut y));
            y
        };
        let found = Isa::every();
        for &isa in &found {
            let one = run(isa, 1);
            assert!(run(isa, 2) == one && run(isa, 3) == one, "{isa:?}: the thread count changed the bits");
        }
        // And the instruction set does not (the AVX2 kernel's sums are the AVX-512 one's).
        if let [wide, narrow] = found[..] {
            assert!(run(wide, 2) == run(narrow, 2), "AVX2 and AVX-512 differ");
        }
    }

    /// Reflect padding: the same as zero padding 0 over the input with its reflection added.
    #[test]
    fn reflect_padding_reads_the_mirrored_rows() {
        let (n, c_in, c_out, kernel, pad) = (40, 6, 45, 5, 2);
        let spec = Conv1dSpec::new(1, n, c_in, c_out, kernel).pad(pad).pad_mode(PadMode::Reflect);
        let (x, w, bias) = (values(n * c_in, 7), values(c_out * c_in * kernel, 8), values(c_out, 9));
        let padded: Vec<f32> = (0..n + 2 * pad)
            .flat_map(|p| {
                let row = PadMode::Reflect.source(p, pad, n).expect("reflect always reads a row");
                x[row * c_in..(row + 1) * c_in].to_vec()
            })
            .collect();
        let want = conv_f64(&Conv1dSpec::new(1, n + 2 * pad, c_in, c_out, kernel), &padded, &w, &bias, Variant::Exact);
        let zero_padded = conv_f64(&Conv1dSpec::new(1, n, c_in, c_out, kernel).pad(pad), &x, &w, &bias, Variant::Exact);
        for isa in Isa::every() {
            let mut y = vec![f32::NAN; n * c_out];
            conv1d(isa, &spec, &x, &w, Some(&bias), &mut y);
            let err = rel_l2(&y, &want);
            assert!(err <= TOLERANCE, "{isa:?} reflect: rel-L2 {err:e}");
            let off = rel_l2(&y, &zero_padded);
            assert!(off > 100.0 * TOLERANCE, "zero padding is only {off:e} away: the test cannot tell them apart");
        }
    }

    #[test]
    fn takes_only_dense_convolutions_with_few_rows() {
        let at = |n| Conv1dSpec::new(1, n, 64, 512, 3).pad(1);
        for isa in Isa::every() {
            assert!(conv_applies(isa, &at(153)));
            let more_rows_than_channels = conv_applies(isa, &Conv1dSpec::new(1, 153, 64, 152, 3).pad(1));
            // Only the direct kernel (AVX-512) beats this path there; AVX2's im2col path does not.
            assert_eq!(more_rows_than_channels, matches!(isa, Isa::Avx2(_)), "{isa:?}: more rows than output channels");
            assert!(!conv_applies(isa, &at(super::BROADCAST_MIN_ROWS - 1)), "under the broadcast kernel's rows");
            assert!(!conv_applies(isa, &at(MAX_CONV_ROWS + 1)), "over the few-row limit");
            assert!(!conv_applies(isa, &at(153).groups(2)), "grouped");
            assert!(!conv_applies(isa, &Conv1dSpec::new(1, 153, 5, 64, 3).pad(1)), "c_in·K under one vector");
        }
    }
}
