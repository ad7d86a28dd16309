//! The bf16 GEMM: rounding, the scalar reference, and the AVX-512 BF16 kernel against it.
//!
//! Most cases use data whose every partial sum is exact in f32 (values on a 1/64 grid, so
//! products are multiples of 2⁻¹² and sums of up to 2¹² of them stay within 24 bits): there the
//! kernel's different summation order cannot change a bit, so kernel and reference must agree
//! EXACTLY, and a wrong tail, stride, pair order or bias shows as a mismatch. A-operands carry a
//! perturbation below half a bf16 ulp, which round-to-nearest removes and truncation does not,
//! so the rounding is checked on the same data.

use super::gemm::{from_bf16, gemm_fast, reference, to_bf16, Avx512Bf16, Operand, KC_PAIRS, MC, MR, NR};
use super::{CpuBf16Backend, CpuBuf};
use crate::spec::{GemmSpec, MatLayout};
use crate::{Backend, CpuBackend};

use super::test_rng::Rng;

impl Rng {
    /// j/64 for j in −64..=64: exact in bf16.
    fn grid(&mut self) -> f32 {
        (self.next() % 129) as f32 / 64.0 - 1.0
    }
    /// A grid value times (1 + r), |r| ≤ 2⁻¹⁰: rounds back to the grid value to nearest, to a
    /// smaller magnitude under truncation when r < 0.
    fn perturbed(&mut self) -> f32 {
        let g = self.grid();
        let r = (self.unit() * 2.0 - 1.0) / 1024.0;
        (g as f64 * (1.0 + r)) as f32
    }
}

#[test]
fn to_bf16_rounds_to_nearest_even() {
    let cases: [(u32, u16); 9] = [
        (0x3F80_0000, 0x3F80), // 1.0 exact
        (0x3F80_8000, 0x3F80), // 1 + half ulp: tie, 0x3F80 is even → down
        (0x3F81_8000, 0x3F82), // tie, 0x3F81 is odd → up to even
        (0x3F80_8001, 0x3F81), // just above half → up
        (0x3F80_7FFF, 0x3F80), // just below half → down
        (0xBF80_C000, 0xBF81), // negative, above half in magnitude → away from zero
        (0x7F7F_FFFF, 0x7F80), // f32::MAX rounds past the bf16 range → +inf
        (0xFF80_0000, 0xFF80), // −inf stays
        (0x0000_0000, 0x0000),
    ];
    for (f, want) in cases {
        assert_eq!(to_bf16(f32::from_bits(f)), want, "{f:#010x}");
    }
    let nan = to_bf16(f32::from_bits(0x7F80_0001));
    assert!(from_bf16(nan).is_nan(), "a NaN whose payload sits in the dropped bits must stay NaN");
    // Widening is exact.
    assert_eq!(from_bf16(0x3F81), 1.0078125);
}

/// Row-major or transposed layouts at an offset with a padded leading dimension, as the models
/// and the tests below use them.
fn layout(transposed: bool, rows: usize, cols: usize, pad: usize, offset: usize) -> MatLayout {
    if transposed {
        MatLayout::transposed(rows + pad).at(offset)
    } else {
        MatLayout::row_major(cols + pad).at(offset)
    }
}

struct Case {
    spec: GemmSpec,
    bias: bool,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    // m, n, k around the tile sizes (MR = 12, NR = 32, MC = 48, KC = 2·256): single rows and
    // columns, odd k, more than one k block, more columns than one chunk.
    let shapes = [
        (1, 1, 1),
        (1, 33, 5),
        (2, 1, 7),
        (MR, NR, 2),
        (MR + 1, NR - 1, 3),
        (MC + 1, 2 * NR + 1, 2 * KC_PAIRS + 1),
        (5, 300, 64),
        (97, 100, 17),
        (3, 70, 4 * KC_PAIRS),
    ];
    for (i, &(m, n, k)) in shapes.iter().enumerate() {
        // The model layout: x row-major, a PyTorch Linear weight [n, k] read transposed.
        out.push(Case { spec: GemmSpec::linear(m, k, n), bias: i % 2 == 0 });
        // Row-major B, padded leading dimensions and offsets everywhere, accumulating (beta 1).
        out.push(Case {
            spec: GemmSpec {
                m,
                n,
                k,
                batch: 1,
                a: layout(false, m, k, 3, 5),
                b: layout(false, k, n, 2, 7),
                c: layout(false, m, n, 4, 1),
                beta: 1.0,
            },
            bias: false,
        });
        // Transposed A (col_stride ≠ 1), beta 0 with bias.
        out.push(Case {
            spec: GemmSpec {
                m,
                n,
                k,
                batch: 1,
                a: layout(true, m, k, 1, 2),
                b: layout(true, k, n, 3, 0),
                c: layout(false, m, n, 0, 0),
                beta: 0.0,
            },
            bias: true,
        });
    }
    // Strided batches of both B layouts.
    for transposed_b in [false, true] {
        let (m, n, k, batch) = (13, 40, 9, 3);
        out.push(Case {
            spec: GemmSpec {
                m,
                n,
                k,
                batch,
                a: layout(false, m, k, 1, 0).batched(m * (k + 1) + 2),
                b: layout(transposed_b, k, n, 1, 3).batched((k + 1) * (n + 1) + 5),
                c: layout(false, m, n, 2, 0).batched(m * (n + 2) + 1),
                beta: if transposed_b { 1.0 } else { 0.0 },
            },
            bias: !transposed_b,
        });
    }
    out
}

/// Operands for a case: A perturbed f32, B either grid f32 or a bf16 copy of grid values, C
/// and bias on the grid, every buffer a little longer than the layout needs (guard cells).
struct Data {
    a: Vec<f32>,
    b: Vec<f32>,
    b16: Vec<u16>,
    bias: Vec<f32>,
    c: Vec<f32>,
}

fn data(s: &GemmSpec, rng: &mut Rng) -> Data {
    let len = |l: &MatLayout, r, c| l.extent(r, c, s.batch).unwrap_or(0) + 3;
    let a: Vec<f32> = (0..len(&s.a, s.m, s.k)).map(|_| rng.perturbed()).collect();
    let b: Vec<f32> = (0..len(&s.b, s.k, s.n)).map(|_| rng.grid()).collect();
    let b16 = b.iter().map(|&x| to_bf16(x)).collect();
    let bias = (0..s.n).map(|_| rng.grid()).collect();
    let c = (0..len(&s.c, s.m, s.n)).map(|_| rng.grid()).collect();
    Data { a, b, b16, bias, c }
}

#[test]
fn reference_is_exact_on_grid_data_and_rounds_to_nearest() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for case in cases() {
        let s = &case.spec;
        let d = data(s, &mut rng);
        let bias = case.bias.then_some(&d.bias[..]);
        let mut got = d.c.clone();
        reference(s, Operand::F32(&d.a), Operand::Bf16(&d.b16), bias, &mut got);
        // f64, on inputs rounded to nearest: exact for grid data, so equal to the last bit.
        let mut want = d.c.clone();
        let mut trunc = d.c.clone();
        for (out, round) in [(&mut want, to_bf16 as fn(f32) -> u16), (&mut trunc, |x: f32| (x.to_bits() >> 16) as u16)] {
            for bi in 0..s.batch {
                for i in 0..s.m {
                    for j in 0..s.n {
                        let mut acc = 0.0f64;
                        for q in 0..s.k {
                            let x = d.a[s.a.offset + bi * s.a.batch_stride + i * s.a.row_stride + q * s.a.col_stride];
                            let w = d.b[s.b.offset + bi * s.b.batch_stride + q * s.b.row_stride + j * s.b.col_stride];
                            acc += from_bf16(round(x)) as f64 * w as f64;
                        }
                        let ci = s.c.offset + bi * s.c.batch_stride + i * s.c.row_stride + j;
                        let prior = if s.beta == 0.0 { bias.map_or(0.0, |b| b[j]) as f64 } else { out[ci] as f64 };
                        out[ci] = (prior + acc) as f32;
                    }
                }
            }
        }
        assert_eq!(got, want, "{s:?}");
        if s.k >= 4 {
            // The wrong rounding (truncation) must be told apart by this very data.
            assert_ne!(got, trunc, "truncation indistinguishable for {s:?}");
        }
    }
}

/// Runs the kernel or says why not; the output names which paths ran.
fn kernel_or_skip(test: &str) -> Option<Avx512Bf16> {
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

#[test]
fn kernel_equals_reference_bit_for_bit_on_edge_shapes() {
    let Some(cpu) = kernel_or_skip("kernel_equals_reference_bit_for_bit_on_edge_shapes") else { return };
    let mut rng = Rng(0x0123_4567_89AB_CDEF);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    let mut packed = Vec::new();
    for case in cases() {
        let s = &case.spec;
        let d = data(s, &mut rng);
        let bias = case.bias.then_some(&d.bias[..]);
        // The model case (bf16 weight), f32 B rounded while packed, and A as the bf16 operand.
        let a16: Vec<u16> = d.a.iter().map(|&x| to_bf16(x)).collect();
        let pairs: [(Operand<'_>, Operand<'_>); 3] = [
            (Operand::F32(&d.a), Operand::Bf16(&d.b16)),
            (Operand::F32(&d.a), Operand::F32(&d.b)),
            (Operand::Bf16(&a16), Operand::F32(&d.b)),
        ];
        for (a, b) in pairs {
            let mut want = d.c.clone();
            reference(s, a, b, bias, &mut want);
            let mut got = d.c.clone();
            pool.install(|| gemm_fast(cpu, s, a, b, bias, &mut got, &mut packed)).unwrap();
            assert_eq!(got, want, "{s:?} bias {}", case.bias);
        }
    }
}

#[test]
fn kernel_k0_writes_bias_or_leaves_c() {
    let Some(cpu) = kernel_or_skip("kernel_k0_writes_bias_or_leaves_c") else { return };
    let mut s = GemmSpec::linear(3, 0, 5);
    let bias = [1.0, 2.0, 3.0, 4.0, 5.0];
    let mut c = vec![9.0; 15];
    gemm_fast(cpu, &s, Operand::F32(&[]), Operand::Bf16(&[]), Some(&bias), &mut c, &mut Vec::new()).unwrap();
    assert_eq!(&c[..5], &bias);
    assert_eq!(&c[10..], &bias);
    s.beta = 1.0;
    let mut c = vec![9.0; 15];
    gemm_fast(cpu, &s, Operand::F32(&[]), Operand::Bf16(&[]), None, &mut c, &mut Vec::new()).unwrap();
    assert_eq!(c, vec![9.0; 15]);
}

#[test]
fn kernel_refuses_overlapping_rows_of_c() {
    let Some(cpu) = kernel_or_skip("kernel_refuses_overlapping_rows_of_c") else { return };
    let mut s = GemmSpec::linear(4, 8, 8);
    s.c = MatLayout::row_major(4);
    let err = gemm_fast(cpu, &s, Operand::F32(&[0.0; 32]), Operand::Bf16(&[0; 64]), None, &mut [0.0; 32], &mut Vec::new());
    assert!(err.unwrap_err().to_string().contains("overlap"));
}

/// Gaussian-like activations and weights at the F5 scale (k = 1024, weights ~ 1/√k): the
/// kernel agrees with the reference to f32 rounding of the sums, and both are a bf16 distance
/// (rel-L2 ~ 2⁻⁸, not the f32 1e-7) from the f64 product of the f32 inputs.
#[test]
fn kernel_on_realistic_data_is_bf16_accurate() {
    let mut rng = Rng(42);
    let (m, k, n) = (40, 1024, 96);
    let normal = |rng: &mut Rng| -> f32 {
        let s: f64 = (0..12).map(|_| rng.unit()).sum::<f64>() - 6.0;
        s as f32
    };
    let a: Vec<f32> = (0..m * k).map(|_| normal(&mut rng)).collect();
    let w: Vec<f32> = (0..n * k).map(|_| normal(&mut rng) / 32.0).collect();
    let w16: Vec<u16> = w.iter().map(|&x| to_bf16(x)).collect();
    let s = GemmSpec::linear(m, k, n);
    let mut exact = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            exact[i * n + j] = (0..k).map(|q| a[i * k + q] as f64 * w[j * k + q] as f64).sum();
        }
    }
    let rel_l2 = |got: &[f32]| {
        let num: f64 = got.iter().zip(&exact).map(|(&g, &e)| (g as f64 - e).powi(2)).sum();
        let den: f64 = exact.iter().map(|e| e * e).sum();
        (num / den).sqrt()
    };
    let mut want = vec![0.0; m * n];
    reference(&s, Operand::F32(&a), Operand::Bf16(&w16), None, &mut want);
    let err_ref = rel_l2(&want);
    println!("reference rel-L2 vs f64 of the f32 inputs: {err_ref:.2e}");
    // Each input carries a relative rounding error ≤ 2⁻⁹, uncorrelated: about 2⁻⁸·(1/√3)·√2
    // ≈ 3e-3 in the sums. 1e-2 fails a kernel that drops or doubles terms; 3e-4 fails one that
    // quietly did not round (an f32 GEMM lands near 1e-7).
    assert!(err_ref > 3e-4 && err_ref < 1e-2, "{err_ref}");
    let Some(cpu) = kernel_or_skip("kernel_on_realistic_data_is_bf16_accurate") else { return };
    let mut got = vec![0.0; m * n];
    gemm_fast(cpu, &s, Operand::F32(&a), Operand::Bf16(&w16), None, &mut got, &mut Vec::new()).unwrap();
    println!("kernel rel-L2 vs f64 of the f32 inputs: {:.2e}", rel_l2(&got));
    // Same rounded products, summed in another order: γ_k bound on each sum, 2k·2⁻²⁴·Σ|x·w|.
    for i in 0..m {
        for j in 0..n {
            let mag: f64 = (0..k).map(|q| (from_bf16(to_bf16(a[i * k + q])) as f64 * from_bf16(w16[j * k + q]) as f64).abs()).sum();
            let tol = 2.0 * k as f64 * f32::EPSILON as f64 / 2.0 * mag;
            let diff = (got[i * n + j] as f64 - want[i * n + j] as f64).abs();
            assert!(diff <= tol, "({i}, {j}): kernel {} reference {} (tol {tol:e})", got[i * n + j], want[i * n + j]);
        }
    }
}

#[test]
fn backend_keeps_weights_in_bf16_and_refuses_them_elsewhere() {
    // On every CPU: with the bf16 kernel where it has one, else on the weights widened.
    let dot = kernel_or_skip("backend_keeps_weights_in_bf16_and_refuses_them_elsewhere").is_some();
    let kit = CpuBf16Backend::with_threads(2).unwrap().with_bf16_dot_products(true);
    assert_eq!(kit.bf16_dot_products(), dot, "dot products exactly where the CPU has the kernel");
    let mut rng = Rng(7);
    let (m, k, n) = (30, 70, 50);
    let x: Vec<f32> = (0..m * k).map(|_| rng.perturbed()).collect();
    let w: Vec<f32> = (0..n * k).map(|_| rng.perturbed()).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.grid()).collect();
    let xb = kit.upload(&x).unwrap();
    let wb = kit.upload_weight(&w).unwrap();
    let bb = kit.upload(&b).unwrap();
    assert!(wb.is_bf16() && !xb.is_bf16());
    // A weight reads back as its bf16 values.
    let back = kit.download(&wb).unwrap();
    assert!(back.iter().zip(&w).all(|(&r, &o)| r == from_bf16(to_bf16(o))));
    let mut y = kit.alloc(m * n).unwrap();
    let s = GemmSpec::linear(m, k, n);
    kit.gemm(&s, &xb, &wb, Some(&bb), &mut y).unwrap();
    let w16: Vec<u16> = w.iter().map(|&v| to_bf16(v)).collect();
    let f32_kit = CpuBackend::with_threads(2).unwrap();
    let mut want = vec![0.0; m * n];
    if dot {
        reference(&s, Operand::F32(&x), Operand::Bf16(&w16), Some(&b), &mut want);
    } else {
        let widened: Vec<f32> = w16.iter().map(|&v| from_bf16(v)).collect();
        f32_kit.gemm(&s, &x, &widened, Some(&b), &mut want).unwrap();
    }
    assert_eq!(kit.download(&y).unwrap(), want);
    // Two f32 operands take the f32 GEMM, unchanged from CpuBackend.
    let wf = kit.upload(&w).unwrap();
    kit.gemm(&s, &xb, &wf, Some(&bb), &mut y).unwrap();
    let mut y32 = f32_kit.alloc(m * n).unwrap();
    f32_kit.gemm(&s, &x, &w, Some(&b), &mut y32).unwrap();
    assert_eq!(kit.download(&y).unwrap(), y32);
    // Any other op refuses the bf16-only weight, naming the op.
    let mut out = kit.alloc(n * k).unwrap();
    let err = kit.layer_norm(&wb, n, k, 1e-6, None, &mut out).unwrap_err().to_string();
    assert!(err.starts_with("layer_norm") && err.contains("bf16 GEMM weight"), "{err}");
    // Writes into a weight round to bf16; copies out widen.
    let mut wb2: CpuBuf = kit.upload_weight(&[0.0; 4]).unwrap();
    kit.write(&mut wb2, 1, &[f32::from_bits(0x3F80_8001)]).unwrap();
    kit.copy(&wb2, 1, &mut out, 0, 1).unwrap();
    assert_eq!(kit.download(&out).unwrap()[0], from_bf16(0x3F81));
}

/// The f16 rounding `upload_weight_compact` must store (`torch.Tensor.half()`'s).
fn f16_rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
}

#[test]
fn compact_weights_are_stored_as_f16_and_compute_in_f32() {
    // On every CPU: f16 weights never meet the bf16 kernels.
    let kit = CpuBf16Backend::with_threads(2).unwrap().with_bf16_dot_products(true);
    let f32_kit = CpuBackend::with_threads(2).unwrap();
    let mut rng = Rng(11);
    let (m, k, n) = (23, 70, 41);
    let x: Vec<f32> = (0..m * k).map(|_| rng.perturbed()).collect();
    let w: Vec<f32> = (0..n * k).map(|_| rng.perturbed()).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.grid()).collect();
    let (xb, bb) = (kit.upload(&x).unwrap(), kit.upload(&b).unwrap());
    let wc = kit.upload_weight_compact(&w).unwrap();
    assert!(wc.is_f16() && !wc.is_bf16());
    let w16 = f16_rounded(&w);
    assert_eq!(kit.download(&wc).unwrap(), w16, "a compact weight reads back as its f16 values");
    assert_ne!(w16, w, "the data must exercise the rounding");

    // gemm: exactly the f32 GEMM on the f16-rounded weight; the unrounded weight gives another
    // result (so the check sees which values were used).
    let s = GemmSpec::linear(m, k, n);
    let mut y = kit.alloc(m * n).unwrap();
    kit.gemm(&s, &xb, &wc, Some(&bb), &mut y).unwrap();
    let mut want = f32_kit.alloc(m * n).unwrap();
    f32_kit.gemm(&s, &x, &w16, Some(&b), &mut want).unwrap();
    assert_eq!(kit.download(&y).unwrap(), want);
    let mut unrounded = f32_kit.alloc(m * n).unwrap();
    f32_kit.gemm(&s, &x, &w, Some(&b), &mut unrounded).unwrap();
    assert_ne!(unrounded, want);
    // As the left operand too (`x · W` with W read row-major).
    let s_left = GemmSpec {
        m: n,
        n: m,
        k,
        batch: 1,
        a: MatLayout::row_major(k),
        b: MatLayout::transposed(k),
        c: MatLayout::row_major(m),
        beta: 0.0,
    };
    let mut yl = kit.alloc(n * m).unwrap();
    kit.gemm(&s_left, &wc, &xb, None, &mut yl).unwrap();
    let mut want_l = f32_kit.alloc(n * m).unwrap();
    f32_kit.gemm(&s_left, &w16, &x, None, &mut want_l).unwrap();
    assert_eq!(kit.download(&yl).unwrap(), want_l);

    // conv1d, dense with padding and depthwise: the f32 convolution on the rounded filters.
    for spec in [crate::Conv1dSpec::new(1, 19, 10, 7, 3).pad(1), crate::Conv1dSpec::new(2, 19, 10, 10, 5).pad(2).groups(10)] {
        let groups = spec.groups.max(1);
        let filters: Vec<f32> = (0..spec.c_out * spec.c_in / groups * spec.kernel).map(|_| rng.perturbed()).collect();
        let input: Vec<f32> = (0..spec.batch * spec.n * spec.c_in).map(|_| rng.perturbed()).collect();
        let out_len = spec.batch * spec.n_out() * spec.c_out;
        let mut got = kit.alloc(out_len).unwrap();
        kit.conv1d(&spec, &kit.upload(&input).unwrap(), &kit.upload_weight_compact(&filters).unwrap(), None, &mut got).unwrap();
        let mut want = f32_kit.alloc(out_len).unwrap();
        f32_kit.conv1d(&spec, &input, &f16_rounded(&filters), None, &mut want).unwrap();
        assert_eq!(kit.download(&got).unwrap(), want, "conv1d {spec:?}");
    }
    // conv_transpose1d (stride 2, depthwise: the shape Kokoro's prosody blocks upsample with).
    let spec = crate::ConvTranspose1dSpec::new(1, 9, 6, 6, 3, 2).pad(1).output_padding(1).groups(6);
    let filters: Vec<f32> = (0..6 * 3).map(|_| rng.perturbed()).collect();
    let input: Vec<f32> = (0..9 * 6).map(|_| rng.perturbed()).collect();
    let out_len = spec.n_out() * 6;
    let mut got = kit.alloc(out_len).unwrap();
    kit.conv_transpose1d(&spec, &kit.upload(&input).unwrap(), &kit.upload_weight_compact(&filters).unwrap(), None, &mut got).unwrap();
    let mut want = f32_kit.alloc(out_len).unwrap();
    f32_kit.conv_transpose1d(&spec, &input, &f16_rounded(&filters), None, &mut want).unwrap();
    assert_eq!(kit.download(&got).unwrap(), want);

    // lstm's recurrent weights.
    let (steps, hidden) = (6, 5);
    let spec = crate::LstmSpec { batch: 1, n: steps, hidden, reverse: false, out: crate::StridedRows { offset: 0, row_stride: hidden } };
    let gates: Vec<f32> = (0..steps * 4 * hidden).map(|_| rng.perturbed()).collect();
    let w_hh: Vec<f32> = (0..4 * hidden * hidden).map(|_| rng.perturbed()).collect();
    let mut got = kit.alloc(steps * hidden).unwrap();
    kit.lstm(&spec, &[steps], &kit.upload(&gates).unwrap(), &kit.upload_weight_compact(&w_hh).unwrap(), None, &mut got).unwrap();
    let mut want = f32_kit.alloc(steps * hidden).unwrap();
    f32_kit.lstm(&spec, &[steps], &gates, &f16_rounded(&w_hh), None, &mut want).unwrap();
    assert_eq!(kit.download(&got).unwrap(), want);

    // A bf16 weight times an f16 weight is refused, not computed in either precision.
    let wb = kit.upload_weight(&w).unwrap();
    let s_ww =
        GemmSpec { m: n, n, k, batch: 1, a: MatLayout::row_major(k), b: MatLayout::transposed(k), c: MatLayout::row_major(n), beta: 0.0 };
    let mut yy = kit.alloc(n * n).unwrap();
    let err = kit.gemm(&s_ww, &wc, &wb, None, &mut yy).unwrap_err().to_string();
    assert!(err.contains("bf16 GEMM weight and an f16 weight"), "{err}");
    // Filling past the end is refused for an f16 weight as for any buffer.
    let mut short = kit.upload_weight_compact(&[0.0; 3]).unwrap();
    assert!(kit.fill(&mut short, 2, 2, 1.0).is_err());
    // Any other op refuses it, naming the op and what it is.
    let mut out = kit.alloc(n * k).unwrap();
    let err = kit.layer_norm(&wc, n, k, 1e-6, None, &mut out).unwrap_err().to_string();
    assert!(err.starts_with("layer_norm") && err.contains("f16 weight"), "{err}");
    // Writes and fills round to f16.
    let mut small = kit.upload_weight_compact(&[0.0; 3]).unwrap();
    kit.write(&mut small, 0, &[0.1]).unwrap();
    kit.fill(&mut small, 1, 2, 1.0 / 3.0).unwrap();
    assert_eq!(kit.download(&small).unwrap(), f16_rounded(&[0.1, 1.0 / 3.0, 1.0 / 3.0]));
    // A weight beyond f16's range stays exact f32 rather than turning into infinities.
    let big = kit.upload_weight_compact(&[1.0e5, 0.1]).unwrap();
    assert!(!big.is_f16());
    assert_eq!(kit.download(&big).unwrap(), vec![1.0e5, 0.1]);
    // The boundary is where f16 rounds to infinity: just below it the weight is f16, from it
    // (either sign) f32; infinities and NaNs are carried by f16 as they are.
    let edge = 65520.0f32;
    assert!(half::f16::from_f32(edge).is_infinite() && half::f16::from_f32(edge.next_down()).is_finite());
    for (value, in_f16) in
        [(edge.next_down(), true), (-edge.next_down(), true), (edge, false), (-edge, false), (f32::INFINITY, true), (f32::NAN, true)]
    {
        assert_eq!(kit.upload_weight_compact(&[value, 0.1]).unwrap().is_f16(), in_f16, "{value}");
    }
}

/// Where the bf16 dot products are off, every op with a bf16 weight is the f32 backend's op on
/// the bf16-rounded weight, bit for bit (the same kernels on the same values; the activations
/// are not rounded): a GEMM, convolutions on each f32 path (few-row, FFT, direct, grouped) and
/// a transposed one. With them on, the same ops round the activations and differ.
#[test]
fn without_bf16_dot_products_bf16_weights_compute_exactly_as_f32_on_their_rounding() {
    // The widened path on every CPU; the kernels' difference from it where the CPU has them.
    let has_kernel = kernel_or_skip("without_bf16_dot_products_bf16_weights_compute_exactly_as_f32_on_their_rounding").is_some();
    use crate::spec::{Conv1dSpec, ConvTranspose1dSpec};
    let widened = CpuBf16Backend::with_threads(2).unwrap().with_bf16_dot_products(false);
    let dot = widened.clone().with_bf16_dot_products(true);
    assert!(!widened.bf16_dot_products() && dot.bf16_dot_products() == has_kernel);
    let f32_kit = CpuBackend::with_threads(2).unwrap();
    let mut rng = Rng(13);
    let mut values = |n: usize| (0..n).map(|_| rng.unit() as f32 * 2.0 - 1.0).collect::<Vec<f32>>();
    let rounded = |w: &[f32]| w.iter().map(|&v| from_bf16(to_bf16(v))).collect::<Vec<f32>>();

    // GEMM: a Linear of 40 rows.
    let s = GemmSpec::linear(40, 96, 72);
    let (x, w, b) = (values(40 * 96), values(72 * 96), values(72));
    let mut want = vec![0.0; 40 * 72];
    f32_kit.gemm(&s, &x, &rounded(&w), Some(&b), &mut want).unwrap();
    for (kit, equal) in [(&widened, true), (&dot, !has_kernel)] {
        let mut y = kit.alloc(40 * 72).unwrap();
        kit.gemm(&s, &kit.upload(&x).unwrap(), &kit.upload_weight(&w).unwrap(), Some(&kit.upload(&b).unwrap()), &mut y).unwrap();
        assert_eq!(kit.download(&y).unwrap() == want, equal, "gemm, bf16 dot products {}", kit.bf16_dot_products());
    }

    // Convolutions: few-row (40 rows, 64 → 96), FFT (k7 over 300 rows), direct (k3 over 300
    // rows of 96 → 64), grouped.
    let convs = [
        Conv1dSpec::new(1, 40, 64, 96, 3).pad(1),
        Conv1dSpec::new(1, 300, 32, 32, 7).pad(3),
        Conv1dSpec::new(1, 300, 96, 64, 3).pad(1),
        Conv1dSpec::new(1, 50, 32, 32, 5).pad(2).groups(4),
    ];
    for spec in convs {
        let (x, w, b) = (values(spec.n * spec.c_in), values(spec.c_out * spec.c_in / spec.groups * spec.kernel), values(spec.c_out));
        let n_y = spec.n_out() * spec.c_out;
        let mut want = vec![0.0; n_y];
        f32_kit.conv1d(&spec, &x, &rounded(&w), Some(&b), &mut want).unwrap();
        let mut y = widened.alloc(n_y).unwrap();
        let (xb, wb, bb) = (widened.upload(&x).unwrap(), widened.upload_weight(&w).unwrap(), widened.upload(&b).unwrap());
        widened.conv1d(&spec, &xb, &wb, Some(&bb), &mut y).unwrap();
        assert!(widened.download(&y).unwrap() == want, "{spec:?}");
        if spec.groups == 1 && has_kernel {
            dot.conv1d(&spec, &xb, &wb, Some(&bb), &mut y).unwrap();
            assert!(dot.download(&y).unwrap() != want, "{spec:?}: the bf16 kernel rounds the input and must differ");
        }
    }

    // Transposed convolutions: the generator's upsampler's shape scaled down (36 input channels,
    // a partial block of the packing's eight, on the direct kernel, which widens the bf16 filters
    // as it packs them), the second upsampler's 22 input channels (below the AVX2 direct kernel:
    // the bank widened whole there), and a grouped one (widened whole everywhere).
    let transposed = [
        ConvTranspose1dSpec::new(1, 30, 36, 16, 8, 4).pad(2),
        ConvTranspose1dSpec::new(1, 20, 22, 16, 12, 6).pad(3),
        ConvTranspose1dSpec::new(1, 20, 32, 32, 4, 2).pad(1).groups(4),
    ];
    for spec in transposed {
        let (x, w, b) = (values(spec.n * spec.c_in), values(spec.c_in * spec.c_out / spec.groups * spec.kernel), values(spec.c_out));
        let n_y = spec.n_out() * spec.c_out;
        let mut want = vec![0.0; n_y];
        f32_kit.conv_transpose1d(&spec, &x, &rounded(&w), Some(&b), &mut want).unwrap();
        let mut y = widened.alloc(n_y).unwrap();
        let (xb, wb, bb) = (widened.upload(&x).unwrap(), widened.upload_weight(&w).unwrap(), widened.upload(&b).unwrap());
        widened.conv_transpose1d(&spec, &xb, &wb, Some(&bb), &mut y).unwrap();
        assert!(widened.download(&y).unwrap() == want, "{spec:?}");
    }
}

/// With the AVX-512 BF16 kernel and no AMX tiles, a dense convolution of 11 taps that the FFT
/// takes runs there on its widened filters, alone and fused with instance norm + Snake: the f32
/// backend's bits on the bf16-rounded filters, whether the bank came as a weight or as
/// convolution filters (uploaded, as models do, with no length). One of 7 taps stays on the bf16
/// kernel, which rounds its input to bf16 and so differs from those bits, as does one of 11 taps
/// over an input too short for the FFT (still within bf16's error of them).
#[test]
fn long_bf16_filters_take_the_fft_where_no_tiles_take_them() {
    use crate::spec::{Conv1dSpec, InstanceNormSpec};
    if kernel_or_skip("long_bf16_filters_take_the_fft_where_no_tiles_take_them").is_none() {
        return;
    }
    let kit = CpuBf16Backend::with_threads(2).unwrap().with_bf16_dot_products(true).without_amx();
    let f32_kit = CpuBackend::with_threads(2).unwrap();
    let mut rng = Rng(23);
    let mut values = |n: usize| (0..n).map(|_| rng.unit() as f32 * 2.0 - 1.0).collect::<Vec<f32>>();
    let rounded = |w: &[f32]| w.iter().map(|&v| from_bf16(to_bf16(v))).collect::<Vec<f32>>();
    let convs = [
        (Conv1dSpec::new(1, 300, 32, 32, 11).dilation(2).pad(10), true),
        (Conv1dSpec::new(1, 300, 32, 32, 7).pad(3), false),
        (Conv1dSpec::new(1, 40, 32, 32, 11).dilation(2).pad(10), false),
    ];
    for (conv, on_fft) in convs {
        let Conv1dSpec { batch, n, c_in: c, .. } = conv;
        let len = batch * n * c;
        let norm = InstanceNormSpec { batch, n, c, eps: 1e-5 };
        let (x, style, w, bias) = (values(len), values(batch * 2 * c), values(c * c * conv.kernel), values(c));
        let alpha: Vec<f32> = values(c).iter().map(|a| 1.0 + 0.4 * a).collect();
        let up = |v: &[f32]| kit.upload(v).unwrap();
        let (xb, sb, ab, bb) = (up(&x), up(&style), up(&alpha), up(&bias));
        let mut t = kit.alloc(len).unwrap();
        kit.instance_norm_snake(&norm, &xb, None, Some(&sb), &ab, &mut t).unwrap();
        let normalised = kit.download(&t).unwrap();
        let (mut want_conv, mut want_fused) = (vec![0.0; len], vec![0.0; len]);
        f32_kit.conv1d(&conv, &x, &rounded(&w), Some(&bias), &mut want_conv).unwrap();
        f32_kit.conv1d(&conv, &normalised, &rounded(&w), Some(&bias), &mut want_fused).unwrap();
        for filters in [kit.upload_weight(&w).unwrap(), kit.upload_conv_filters(&w, &Conv1dSpec { n: 0, ..conv }).unwrap()] {
            let mut y = kit.alloc(len).unwrap();
            kit.conv1d(&conv, &xb, &filters, Some(&bb), &mut y).unwrap();
            let got = kit.download(&y).unwrap();
            assert_eq!(got == want_conv, on_fft, "{conv:?}: conv1d on the FFT path");
            // bf16-rounded inputs: ~2⁻⁹ relative per product, averaging down over 352 products.
            let err = crate::cpu::conv::f64_reference::rel_l2(&got, &want_conv.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
            assert!(err < 1e-2, "{conv:?}: rel-L2 {err:.2e}");
            kit.instance_norm_snake_conv1d(&norm, &xb, None, Some(&sb), &ab, &conv, &filters, Some(&bb), &mut t, &mut y).unwrap();
            assert_eq!(kit.download(&y).unwrap() == want_fused, on_fft, "{conv:?}: fused step on the FFT path");
        }
    }
}

/// Where the bf16 dot products are off, instance norm + Snake + convolution (and its residual
/// form) on a bf16 filter bank runs fused on the f32 backend's tiled paths, the FFT for 7 taps
/// and Winograd for 3: the bits of the ops apart on this backend, with the scratch never
/// written (at Kokoro's generator's last rate that scratch is an activation's size) and the
/// residual form's input left as it was.
#[test]
fn without_bf16_dot_products_norm_snake_conv_fuses_on_widened_filters() {
    use crate::spec::{Conv1dSpec, InstanceNormSpec};
    let kit = CpuBf16Backend::with_threads(2).unwrap().with_bf16_dot_products(false);
    let mut rng = Rng(19);
    let mut values = |n: usize| (0..n).map(|_| rng.unit() as f32 * 2.0 - 1.0).collect::<Vec<f32>>();
    for conv in [Conv1dSpec::new(2, 300, 32, 32, 7).dilation(2).pad(6), Conv1dSpec::new(2, 1100, 32, 32, 3).dilation(3).pad(3)] {
        let Conv1dSpec { batch, n, c_in: c, .. } = conv;
        let len = batch * n * c;
        let norm = InstanceNormSpec { batch, n, c, eps: 1e-5 };
        // Items offset and scaled apart, so one item's statistics would not fit the other's.
        let x: Vec<f32> = values(len).iter().enumerate().map(|(i, v)| v * (1.0 + (i / (n * c)) as f32) + (i / (n * c)) as f32).collect();
        let (style, w, bias, y0) = (values(batch * 2 * c), values(c * c * conv.kernel), values(c), values(len));
        let alpha: Vec<f32> = values(c).iter().map(|a| 1.0 + 0.4 * a).collect();
        let up = |v: &[f32]| kit.upload(v).unwrap();
        let (xb, sb, ab, bb, wb) = (up(&x), up(&style), up(&alpha), up(&bias), kit.upload_weight(&w).unwrap());
        let (mut t, mut out) = (kit.alloc(len).unwrap(), kit.alloc(len).unwrap());
        kit.instance_norm_snake(&norm, &xb, None, Some(&sb), &ab, &mut t).unwrap();
        kit.conv1d(&conv, &t, &wb, Some(&bb), &mut out).unwrap();
        let mut added = up(&y0);
        kit.axpy(1.0, &out, &mut added, len).unwrap();
        let bits = |b: &CpuBuf| kit.download(b).unwrap().iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        let untouched = |b: &CpuBuf| kit.download(b).unwrap().iter().all(|v| v.is_nan());

        let (mut scratch, mut y) = (up(&vec![f32::NAN; len]), kit.alloc(len).unwrap());
        kit.instance_norm_snake_conv1d(&norm, &xb, None, Some(&sb), &ab, &conv, &wb, Some(&bb), &mut scratch, &mut y).unwrap();
        assert!(bits(&y) == bits(&out), "{conv:?}: the fused step differs from the two ops");
        assert!(untouched(&scratch), "{conv:?}: the fused step wrote the scratch");

        let (mut consumed, mut scratch, mut y) = (up(&x), up(&vec![f32::NAN; len]), up(&y0));
        kit.instance_norm_snake_conv1d_add(&norm, &mut consumed, None, Some(&sb), &ab, &conv, &wb, Some(&bb), &mut scratch, &mut y)
            .unwrap();
        assert!(bits(&y) == bits(&added), "{conv:?}: the fused residual step differs from the three ops");
        assert!(untouched(&scratch), "{conv:?}: the fused residual step wrote the scratch");
        assert!(kit.download(&consumed).unwrap() == x, "{conv:?}: the fused residual step wrote its input");
    }
}
