//! The bf16 attention: conversions, the scalar reference, and the AVX-512 BF16 kernel against it
//! and against f64 attention on the unrounded inputs.
//!
//! Kernel against reference: q and k are values on a 1/64 grid, perturbed by less than half a
//! bf16 ulp (round-to-nearest removes the perturbation, truncation or no rounding does not).
//! Their products are multiples of 2⁻¹², so the scores are exact in f32 in any summation order
//! and both paths get the same scores, the same exp and the same rounded weights bit for bit.
//! What is left to differ is the order of two f32 sums of positive-weighted terms: z = Σ e and
//! Σ p·v. Each path is within γ_n = n·2⁻²⁴/(1 − n·2⁻²⁴) of the exact sum (relative to Σ p·|v|),
//! so |kernel − reference| ≤ (4γ_n + 4·2⁻²⁴)·(Σ p·|v|)/z: a worst-case bound, tens of times
//! below the effect of a kernel that skips a rounding (2⁻⁹ relative on a score or a weight).

use super::attention::{attention, reference, reference_variant, round_pairs, Variant, PANEL, QUERY_BLOCK, ROWS};
use super::gemm::{to_bf16, Avx512Bf16};
use super::CpuBf16Backend;
use crate::spec::AttentionSpec;
use crate::Backend;

use super::test_rng::Rng;

impl Rng {
    /// j/64 for j in −64..=64, times (1 + r), |r| ≤ 2⁻¹⁰: rounds to the grid value.
    fn perturbed_grid(&mut self) -> f32 {
        let g = (self.next() % 129) as f64 / 64.0 - 1.0;
        (g * (1.0 + (self.unit() * 2.0 - 1.0) / 1024.0)) as f32
    }
    /// Roughly standard normal (sum of 12 uniforms − 6).
    fn normal(&mut self) -> f32 {
        ((0..12).map(|_| self.unit()).sum::<f64>() - 6.0) as f32
    }
}

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

/// (batch·heads, n, head_dim, scale) around the tiles: one key; n and head_dim below, at and
/// past the panel (64) and strip (6) sizes, odd head_dims, several query blocks with a partial
/// last one (n = 300: three blocks of 96 and 12 rows), the F5 head width.
fn shapes() -> Vec<(usize, usize, usize, f32)> {
    let shapes = vec![
        (1, 1, 1, 1.0),
        (1, 1, 64, 0.125),
        (2, 5, 3, 1.0),
        (1, ROWS + 1, 17, 0.5),
        (1, PANEL - 1, 64, 0.125),
        (1, PANEL, 32, 1.0),
        (1, PANEL + 1, PANEL + 1, 0.125),
        (3, QUERY_BLOCK + 2, 64, 1.0),
        (1, 300, 33, 1.0 / 33f32.sqrt()),
        (2, 129, 128, 0.125),
    ];
    const { assert!(QUERY_BLOCK < 300 && 300 % QUERY_BLOCK != 0, "n = 300 must end in a partial query block") };
    shapes
}

struct Data {
    spec: AttentionSpec,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn grid_data(rng: &mut Rng, (bh, n, d, scale): (usize, usize, usize, f32)) -> Data {
    let len = bh * n * d;
    // q ∈ [−2, 2] (still a grid of multiples of 2⁻⁵, so products stay multiples of 2⁻¹¹ and
    // exact): scores of a few units, a softmax far from uniform.
    let q = (0..len).map(|_| 2.0 * rng.perturbed_grid()).collect();
    let k = (0..len).map(|_| rng.perturbed_grid()).collect();
    let v = (0..len).map(|_| rng.normal()).collect();
    Data { spec: AttentionSpec { batch_heads: bh, n, head_dim: d, scale }, q, k, v }
}

fn run_reference(data: &Data, variant: Variant) -> Vec<f32> {
    let mut out = vec![0.0; data.q.len()];
    reference_variant(&data.spec, &data.q, &data.k, &data.v, &mut out, variant);
    out
}

fn run_kernel(cpu: Avx512Bf16, data: &Data) -> Vec<f32> {
    // Stale values in the output must all be overwritten.
    let mut out = vec![f32::NAN; data.q.len()];
    attention(cpu, &data.spec, &data.q, &data.k, &data.v, &mut out);
    out
}

/// Per element, the bound of the module docs: (4γ_n + 4·2⁻²⁴)·(Σ p·|v|)/z, with (Σ p·|v|)/z from
/// the reference run on |v|.
fn sum_order_bound(data: &Data) -> Vec<f64> {
    let abs_v: Vec<f32> = data.v.iter().map(|x| x.abs()).collect();
    let mut weighted = vec![0.0; data.q.len()];
    reference(&data.spec, &data.q, &data.k, &abs_v, &mut weighted);
    let u = f64::powi(2.0, -24);
    let gamma = data.spec.n as f64 * u / (1.0 - data.spec.n as f64 * u);
    weighted.iter().map(|&w| (4.0 * gamma + 4.0 * u) * w as f64 * 1.01 + 1e-30).collect()
}

/// Elements where |got − want| exceeds the bound.
fn outside(got: &[f32], want: &[f32], bound: &[f64]) -> usize {
    got.iter().zip(want).zip(bound).filter(|((&g, &w), &b)| ((g as f64 - w as f64).abs() > b) || g.is_nan()).count()
}

#[test]
fn round_pairs_matches_scalar_rounding() {
    let Some(cpu) = kernel_or_skip("round_pairs_matches_scalar_rounding") else { return };
    let mut rng = Rng(5);
    for len in 0..100 {
        let mut src: Vec<f32> = (0..len).map(|_| rng.normal() * 100.0).collect();
        // Exact ties (…8000 in the dropped half), both parities of the kept bit.
        for (i, x) in src.iter_mut().enumerate().step_by(3) {
            *x = f32::from_bits((x.to_bits() & 0xFFFF_0000) | 0x8000 | ((i as u32 & 2) << 15));
        }
        let want: Vec<u32> = src.chunks(2).map(|p| to_bf16(p[0]) as u32 | (p.get(1).map_or(0, |&x| to_bf16(x) as u32) << 16)).collect();
        let mut got = vec![0xDEAD_BEEF; want.len()];
        round_pairs(cpu, &src, &mut got);
        assert_eq!(got, want, "len {len}");
    }
}

#[test]
fn kernel_matches_reference_on_every_shape() {
    let Some(cpu) = kernel_or_skip("kernel_matches_reference_on_every_shape") else { return };
    let mut rng = Rng(1);
    for shape in shapes() {
        let data = grid_data(&mut rng, shape);
        let (got, want) = (run_kernel(cpu, &data), run_reference(&data, Variant::default()));
        let bound = sum_order_bound(&data);
        let worst = got.iter().zip(&want).zip(&bound).map(|((&g, &w), &b)| (g as f64 - w as f64).abs() / b).fold(0.0, f64::max);
        println!("{shape:?}: max |kernel − reference| / bound = {worst:.3}");
        assert_eq!(outside(&got, &want, &bound), 0, "{shape:?}: worst error {worst} × bound");
    }
}

#[test]
fn a_kernel_that_skips_a_step_fails_the_reference_check() {
    let Some(cpu) = kernel_or_skip("a_kernel_that_skips_a_step_fails_the_reference_check") else { return };
    let mut rng = Rng(2);
    let data = grid_data(&mut rng, (2, QUERY_BLOCK + 2, 64, 0.25));
    let got = run_kernel(cpu, &data);
    let bound = sum_order_bound(&data);
    let wrong = [
        ("keys not rounded", Variant { keep_k_f32: true, ..Variant::default() }),
        ("weights not rounded", Variant { keep_p_f32: true, ..Variant::default() }),
        ("weights not normalised", Variant { unnormalised: true, ..Variant::default() }),
    ];
    for (what, variant) in wrong {
        // The kernel (which does every step) against a reference that skips one: as far apart
        // as a kernel that skipped it would be from the true reference.
        let bad = outside(&got, &run_reference(&data, variant), &bound);
        println!("{what}: {bad} of {} elements outside the bound", got.len());
        assert!(bad > got.len() / 100, "{what}: only {bad} elements outside the bound");
    }
}

/// f64 attention on the unrounded inputs.
fn f64_attention(data: &Data) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let AttentionSpec { batch_heads, n, head_dim: d, scale } = data.spec;
    let (q, k, v) = (&data.q, &data.k, &data.v);
    let (mut out, mut weighted_abs, mut score_bound) = (vec![0.0; q.len()], vec![0.0; q.len()], vec![0.0; batch_heads * n]);
    for h in 0..batch_heads {
        let base = h * n * d;
        for i in 0..n {
            let dot =
                |j: usize, f: &dyn Fn(f64) -> f64| (0..d).map(|t| f(q[base + i * d + t] as f64 * k[base + j * d + t] as f64)).sum::<f64>();
            let s: Vec<f64> = (0..n).map(|j| scale as f64 * dot(j, &|x| x)).collect();
            score_bound[h * n + i] = (0..n).map(|j| (scale as f64).abs() * dot(j, &|x: f64| x.abs())).fold(0.0, f64::max);
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..d {
                let col = |f: &dyn Fn(f64) -> f64| (0..n).map(|j| e[j] * f(v[base + j * d + c] as f64)).sum::<f64>() / z;
                out[base + i * d + c] = col(&|x| x);
                weighted_abs[base + i * d + c] = col(&|x: f64| x.abs());
            }
        }
    }
    (out, weighted_abs, score_bound)
}

/// Against exact attention on the unrounded inputs, with a bound from bf16's unit roundoff
/// u = 2⁻⁸ alone: rounding q and k moves each score by at most E = ((1+u)² − 1)·|scale|·Σ_t|q·k|;
/// a softmax weight then moves by a factor within e^(±2E), its bf16 rounding and v's add a
/// factor (1 ± u) each, so |Δo| ≤ (e^(2E)·(1+u)² − 1)·Σ_j w_j·|v_j|, plus f32 accumulation
/// (≤ 2(n + d)·2⁻²⁴ of the same sum, generously). Checked for the reference (every machine) and
/// the kernel, on Gaussian data that no rounding leaves exact.
#[test]
fn reference_and_kernel_stay_within_the_bf16_bound_of_f64_attention() {
    let cpu = kernel_or_skip("reference_and_kernel_stay_within_the_bf16_bound_of_f64_attention");
    let mut rng = Rng(3);
    let u = f64::powi(2.0, -8);
    for (bh, n, d, scale) in [(2, 300, 64, 0.125f32), (1, 77, 65, 0.2), (1, 1, 5, 1.0)] {
        let len = bh * n * d;
        let mut vals = |s: f32| (0..len).map(|_| s * rng.normal()).collect::<Vec<f32>>();
        let (q, k, v) = (vals(1.5), vals(1.0), vals(1.0));
        let data = Data { spec: AttentionSpec { batch_heads: bh, n, head_dim: d, scale }, q, k, v };
        let (exact, weighted_abs, score_bound) = f64_attention(&data);
        let bound: Vec<f64> = weighted_abs
            .iter()
            .enumerate()
            .map(|(idx, &w)| {
                let e = ((1.0 + u) * (1.0 + u) - 1.0) * score_bound[idx / d];
                ((2.0 * e).exp() * (1.0 + u) * (1.0 + u) - 1.0 + 2.0 * (n + d) as f64 * f64::powi(2.0, -24)) * w
            })
            .collect();
        let mut paths = vec![("reference", run_reference(&data, Variant::default()))];
        if let Some(cpu) = cpu {
            paths.push(("kernel", run_kernel(cpu, &data)));
        }
        for (path, got) in paths {
            let err: Vec<f64> = got.iter().zip(&exact).map(|(&g, &x)| g as f64 - x).collect();
            let worst = err.iter().zip(&bound).map(|(e, b)| e.abs() / b).fold(0.0, f64::max);
            let rel_l2 = (err.iter().map(|e| e * e).sum::<f64>() / exact.iter().map(|x| x * x).sum::<f64>()).sqrt();
            println!("{path} {n}×{d}: rel-L2 vs f64 {rel_l2:.2e}, max error / bound {worst:.3}");
            assert!(worst <= 1.0, "{path} {n}×{d}: error {worst} × the bf16 bound");
            // Not secretly f32: that would be ~1e-7 off; bf16 inputs put it near 1e-3.
            if n > 1 {
                assert!(rel_l2 > 1e-4, "{path} {n}×{d}: rel-L2 {rel_l2} is f32-accurate, so something was not rounded");
            }
        }
    }
}

/// The backend's op: validates, runs the kernel on its pool, and gives the same bits on any
/// number of threads (each output row is computed by one task, with no cross-task sum).
#[test]
fn backend_attention_is_the_kernel_on_any_thread_count() {
    let Some(cpu) = kernel_or_skip("backend_attention_is_the_kernel_on_any_thread_count") else { return };
    let mut rng = Rng(4);
    let data = grid_data(&mut rng, (3, 2 * QUERY_BLOCK + 5, 64, 0.125));
    let want = run_kernel(cpu, &data);
    for threads in [1, 3] {
        let kit = CpuBf16Backend::with_threads(threads).expect("bf16 backend on a CPU that has the kernel").with_bf16_dot_products(true);
        let (q, k, v) = (kit.upload(&data.q).unwrap(), kit.upload(&data.k).unwrap(), kit.upload(&data.v).unwrap());
        let mut out = kit.alloc(data.q.len()).unwrap();
        kit.attention(&data.spec, &q, &k, &v, &mut out).unwrap();
        assert!(kit.download(&out).unwrap() == want, "{threads} threads");
        let mut short = kit.alloc(data.q.len() - 1).unwrap();
        assert!(kit.attention(&data.spec, &q, &k, &v, &mut short).is_err(), "a short output must be refused");
    }
}
