//! The op-case table: every op of the kit on ordinary, odd and edge shapes, against a
//! straightforward f64 reference written here, with guard cells after every output to catch
//! writes past the end. The suite is written once, generic over `Backend`, and instantiated per
//! backend at the bottom; a GPU backend runs the very same cases.
//!
//! Inputs are uniform in [-1, 1] (deterministic), so every reference value is O(1) and an
//! absolute tolerance is meaningful. Each tolerance is stated where it is used, with its reason.

// The f64 references index like the formulas they transcribe.
#![allow(clippy::needless_range_loop)]

use f5_gpukit::{
    Activation, AttentionSpec, Backend, Conv1dSpec, ConvTranspose1dSpec, GemmSpec, InstanceNormSpec, InterpolateSpec, LstmSpec, MatLayout,
    Pad1dSpec, PadMode, RopeSpec, StftSpec, StridedRows,
};

/// Values after each output that no op may touch.
const GUARD: usize = 17;
const SENTINEL: f32 = -7.777e7;

struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// An output buffer of `len` values followed by guard cells, pre-filled with `init`.
fn guarded<B: Backend>(kit: &B, init: &[f32]) -> B::Buf {
    let mut v = init.to_vec();
    v.extend(std::iter::repeat_n(SENTINEL, GUARD));
    kit.upload(&v).expect("upload")
}

/// Downloads a guarded output, checks the guard cells, returns the payload.
fn take<B: Backend>(kit: &B, buf: &B::Buf, len: usize, what: &str) -> Vec<f32> {
    let v = kit.download(buf).expect("download");
    assert_eq!(v.len(), len + GUARD, "{what}: buffer length changed");
    for (i, &g) in v[len..].iter().enumerate() {
        assert_eq!(g.to_bits(), SENTINEL.to_bits(), "{what}: guard cell {i} past the output was written");
    }
    v[..len].to_vec()
}

#[track_caller]
fn assert_close(got: &[f32], want: &[f64], tol: impl Fn(f64) -> f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let d = (g as f64 - w).abs();
        assert!(d <= tol(w), "{what}: element {i}: got {g}, want {w} (|Δ| = {d:e}, tolerance {:e})", tol(w));
    }
}

fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

// ── GEMM ─────────────────────────────────────────────────────────────────────────────────────

fn ref_gemm(s: &GemmSpec, a: &[f32], b: &[f32], bias: Option<&[f32]>, c0: &[f32]) -> Vec<f64> {
    let mut c = f64s(c0);
    for bi in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = 0.0f64;
                for p in 0..s.k {
                    let av = a[s.a.offset + bi * s.a.batch_stride + i * s.a.row_stride + p * s.a.col_stride] as f64;
                    let bv = b[s.b.offset + bi * s.b.batch_stride + p * s.b.row_stride + j * s.b.col_stride] as f64;
                    acc += av * bv;
                }
                let ci = s.c.offset + bi * s.c.batch_stride + i * s.c.row_stride + j;
                let base = if s.beta != 0.0 { c[ci] } else { bias.map_or(0.0, |bv| bv[j] as f64) };
                c[ci] = base + acc;
            }
        }
    }
    c
}

pub fn gemm<B: Backend>(kit: &B) {
    let mut rng = Rng::new(1);
    let mut cases: Vec<(GemmSpec, bool)> = Vec::new();
    // PyTorch Linear layout (weight [n, k] read transposed), with and without bias, odd shapes.
    // k = 0 (an empty input feature axis) is a sum of no terms: the output is the bias alone.
    // (58, 70, 300) and (7, 40, 256): few rows, many columns — the CPU backend splits those
    // into column blocks that run in parallel (the last one partial in the first).
    for &(m, k, n) in
        &[(1, 1, 1), (3, 5, 7), (17, 33, 65), (64, 64, 64), (130, 257, 95), (2, 712, 128), (3, 0, 5), (58, 70, 300), (7, 40, 256)]
    {
        cases.push((GemmSpec::linear(m, k, n), true));
        cases.push((GemmSpec::linear(m, k, n), false));
    }
    // Plain row-major B, accumulate into C, operands at offsets inside larger buffers.
    let mut s = GemmSpec::linear(9, 31, 13);
    s.b = MatLayout::row_major(13 + 2).at(5);
    s.a = MatLayout::row_major(31 + 3).at(7);
    s.c = MatLayout::row_major(13 + 4).at(3);
    s.beta = 1.0;
    cases.push((s, false));
    // The same with few rows and many columns (column blocks at offsets of a row-major B and C).
    let mut s = GemmSpec::linear(5, 9, 270);
    s.b = MatLayout::row_major(270 + 2).at(4);
    s.a = MatLayout::row_major(9 + 1).at(2);
    s.c = MatLayout::row_major(270 + 3).at(1);
    s.beta = 1.0;
    cases.push((s, false));
    // Strided batch: q·kᵀ per head, read out of a [n, heads·d] activation.
    let (heads, nq, d) = (3, 11, 8);
    cases.push((
        GemmSpec {
            m: nq,
            n: nq,
            k: d,
            batch: heads,
            a: MatLayout::row_major(heads * d).batched(d),
            b: MatLayout::transposed(heads * d).batched(d),
            c: MatLayout::row_major(nq).batched(nq * nq),
            beta: 0.0,
        },
        false,
    ));
    for (spec, with_bias) in cases {
        let a_len = spec.a.extent(spec.m, spec.k, spec.batch).unwrap() + 3;
        let b_len = spec.b.extent(spec.k, spec.n, spec.batch).unwrap() + 3;
        let c_len = spec.c.extent(spec.m, spec.n, spec.batch).unwrap();
        let (a, b, bias, c0) = (rng.vec(a_len), rng.vec(b_len), rng.vec(spec.n), rng.vec(c_len));
        let want = ref_gemm(&spec, &a, &b, with_bias.then_some(&bias[..]), &c0);
        let (ab, bb, biasb) = (kit.upload(&a).unwrap(), kit.upload(&b).unwrap(), kit.upload(&bias).unwrap());
        let mut cb = guarded(kit, &c0);
        kit.gemm(&spec, &ab, &bb, with_bias.then_some(&biasb), &mut cb).unwrap();
        let got = take(kit, &cb, c_len, "gemm");
        // f32 accumulation over k products of magnitude ≤ 1 errs by ≲ √k·ε typically and k·ε in
        // the worst case; 2e-6·k allows any summation order while a wrong element is off by O(1).
        let tol = 2e-6 * spec.k as f64 + 1e-6;
        assert_close(&got, &want, |_| tol, &format!("gemm {spec:?} bias={with_bias}"));
        // B as a weight stored compactly (`upload_weight_compact`: f16 on the bf16 CPU backend,
        // f32 elsewhere): products are f32 products of the stored values, so the reference on
        // the values read back from it is held to the same bound.
        let bc = kit.upload_weight_compact(&b).unwrap();
        let stored = kit.download(&bc).unwrap();
        let want = ref_gemm(&spec, &a, &stored, with_bias.then_some(&bias[..]), &c0);
        let mut cb = guarded(kit, &c0);
        kit.gemm(&spec, &ab, &bc, with_bias.then_some(&biasb), &mut cb).unwrap();
        assert_close(&take(kit, &cb, c_len, "gemm"), &want, |_| tol, &format!("gemm {spec:?} bias={with_bias} B compact"));
        // B as a `Linear` weight kept near f32 (`upload_linear_weight_near_f32`: split into two
        // bf16 parts on the bf16 CPU backend with AMX, f32 elsewhere), for the plain `Linear`
        // cases: each product is within 3·2⁻¹⁶ of the exact one, relative (both operands carry
        // 16 bits, the lo·lo product is dropped), which adds 5e-5 per product of magnitude ≤ 1
        // to the bound; a wrong element is still off by O(1).
        let linear = GemmSpec::linear(spec.m, spec.k, spec.n);
        if spec.batch == 1 && spec.beta == 0.0 && spec.a == linear.a && spec.b == linear.b && spec.c == linear.c {
            let w = &b[..spec.n * spec.k];
            let bn = kit.upload_linear_weight_near_f32(w, spec.n, spec.k).unwrap();
            let want = ref_gemm(&spec, &a, w, with_bias.then_some(&bias[..]), &c0);
            let mut cb = guarded(kit, &c0);
            kit.gemm(&spec, &ab, &bn, with_bias.then_some(&biasb), &mut cb).unwrap();
            let tol = tol + 5e-5 * spec.k as f64;
            assert_close(&take(kit, &cb, c_len, "gemm"), &want, |_| tol, &format!("gemm {spec:?} bias={with_bias} B near f32"));
        }
    }
}

// ── attention ────────────────────────────────────────────────────────────────────────────────

fn ref_attention(s: &AttentionSpec, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
    let (n, d) = (s.n, s.head_dim);
    let mut out = vec![0.0; s.batch_heads * n * d];
    for h in 0..s.batch_heads {
        let base = h * n * d;
        for i in 0..n {
            let scores: Vec<f64> = (0..n)
                .map(|j| (0..d).map(|t| q[base + i * d + t] as f64 * k[base + j * d + t] as f64).sum::<f64>() * s.scale as f64)
                .collect();
            let m = scores.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for t in 0..d {
                out[base + i * d + t] = (0..n).map(|j| e[j] * v[base + j * d + t] as f64).sum::<f64>() / z;
            }
        }
    }
    out
}

/// How a backend's attention computes, which decides what its reference sees and its tolerance.
#[derive(Clone, Copy, Debug)]
pub enum AttentionArithmetic {
    F32,
    /// q, k, v and the softmax weights rounded to bf16, f32 accumulation (`CpuBf16Backend`).
    Bf16,
}

/// f32 → the nearest bf16 value (ties to even), as an f32; the test data has no NaN.
fn round_bf16(x: f32) -> f32 {
    let bits = x.to_bits();
    f32::from_bits((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF_0000)
}

pub fn attention<B: Backend>(kit: &B, arithmetic: AttentionArithmetic) {
    let mut rng = Rng::new(2);
    // n = 300 spans several query blocks, the last one partial; n = 1 is a single key.
    // 65,537 slices: more than a CUDA grid's y axis holds (65,535), so a kernel must loop.
    let cases = [(1, 1, 64, 0.125), (3, 17, 64, 0.125), (2, 300, 64, 0.125), (1, 129, 8, 0.5), (4, 33, 16, 1.0), (65_537, 2, 2, 1.0)];
    for &(bh, n, d, scale) in &cases {
        let spec = AttentionSpec { batch_heads: bh, n, head_dim: d, scale };
        let len = bh * n * d;
        // Scores up to ~±8 make the softmax far from uniform, so a wrong axis or scale shows.
        let q: Vec<f32> = rng.vec(len).iter().map(|x| x * 2.0).collect();
        let (k, v) = (rng.vec(len), rng.vec(len));
        let (qb, kb, vb) = (kit.upload(&q).unwrap(), kit.upload(&k).unwrap(), kit.upload(&v).unwrap());
        // The bf16 backend's reference gets the inputs it computes with: q, k, v rounded.
        let rounded = |x: &[f32]| x.iter().map(|&x| round_bf16(x)).collect::<Vec<f32>>();
        let want = match arithmetic {
            AttentionArithmetic::F32 => ref_attention(&spec, &q, &k, &v),
            AttentionArithmetic::Bf16 => ref_attention(&spec, &rounded(&q), &rounded(&k), &rounded(&v)),
        };
        let mut out = guarded(kit, &vec![0.0; len]);
        kit.attention(&spec, &qb, &kb, &vb, &mut out).unwrap();
        let got = take(kit, &out, len, "attention");
        // Outputs are convex combinations of v ∈ [-1, 1]; the fast exp (rel. error 2e-7) and f32
        // sums over n keys keep the error near 1e-6. bf16 also rounds each softmax weight
        // (relative 2⁻⁸), which moves a convex combination of |v| ≤ 1 by at most 2⁻⁸.
        let tol = match arithmetic {
            AttentionArithmetic::F32 => 2e-5,
            AttentionArithmetic::Bf16 => 2e-5 + f64::powi(2.0, -8),
        };
        assert_close(&got, &want, |_| tol, &format!("attention {spec:?}"));
    }
}

// ── normalisation ────────────────────────────────────────────────────────────────────────────

fn ref_norm_row(x: &[f32], eps: f32) -> Vec<f64> {
    let d = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / d;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d;
    x.iter().map(|&v| (v as f64 - mean) / (var + eps as f64).sqrt()).collect()
}

pub fn layer_norm<B: Backend>(kit: &B) {
    let mut rng = Rng::new(3);
    for &(rows, d, offset) in &[(1, 1, 0.0), (3, 7, 0.0), (5, 1024, 0.0), (2, 33, 100.0), (40, 512, 0.0)] {
        // A large common offset checks the variance is computed around the mean (a one-pass
        // E[x²] − E[x]² loses it in f32).
        let x: Vec<f32> = rng.vec(rows * d).iter().map(|v| v + offset).collect();
        let (w, b) = (rng.vec(d), rng.vec(d));
        let xb = kit.upload(&x).unwrap();
        let (wb, bb) = (kit.upload(&w).unwrap(), kit.upload(&b).unwrap());
        for affine in [false, true] {
            let mut want = Vec::new();
            for r in 0..rows {
                let n = ref_norm_row(&x[r * d..(r + 1) * d], 1e-6);
                want.extend(n.iter().enumerate().map(|(j, &v)| if affine { v * w[j] as f64 + b[j] as f64 } else { v }));
            }
            let mut out = guarded(kit, &vec![0.0; rows * d]);
            kit.layer_norm(&xb, rows, d, 1e-6, affine.then_some((&wb, &bb)), &mut out).unwrap();
            let got = take(kit, &out, rows * d, "layer_norm");
            // d = 1 normalises to exactly 0; elsewhere the outputs are O(1)-O(3) and f32
            // statistics over ≤1024 values err by ~1e-6 relative.
            assert_close(&got, &want, |w| 1e-5 * (1.0 + w.abs()), &format!("layer_norm rows={rows} d={d} affine={affine}"));
        }
    }
}

pub fn adaln_modulate<B: Backend>(kit: &B) {
    let mut rng = Rng::new(4);
    for &(rows, d) in &[(1, 1), (6, 13), (9, 256)] {
        let x = rng.vec(rows * d);
        // Six d-vectors in F5's chunk order: shift_msa, scale_msa, gate_msa, shift_mlp, …
        let m = rng.vec(6 * d);
        let (shift_off, scale_off) = (3 * d, 4 * d);
        let mut want = Vec::new();
        for r in 0..rows {
            let n = ref_norm_row(&x[r * d..(r + 1) * d], 1e-6);
            want.extend(n.iter().enumerate().map(|(j, &v)| v * (1.0 + m[scale_off + j] as f64) + m[shift_off + j] as f64));
        }
        let (xb, mb) = (kit.upload(&x).unwrap(), kit.upload(&m).unwrap());
        let mut out = guarded(kit, &vec![0.0; rows * d]);
        kit.adaln_modulate(&xb, rows, d, 1e-6, &mb, shift_off, scale_off, &mut out).unwrap();
        let got = take(kit, &out, rows * d, "adaln_modulate");
        assert_close(&got, &want, |w| 1e-5 * (1.0 + w.abs()), &format!("adaln rows={rows} d={d}"));
    }
}

pub fn gated_add<B: Backend>(kit: &B) {
    let mut rng = Rng::new(5);
    for &(rows, d) in &[(1, 1), (7, 19), (33, 128)] {
        let (x, y, g) = (rng.vec(rows * d), rng.vec(rows * d), rng.vec(3 * d));
        let want: Vec<f64> = (0..rows * d).map(|i| x[i] as f64 + g[2 * d + i % d] as f64 * y[i] as f64).collect();
        let (yb, gb) = (kit.upload(&y).unwrap(), kit.upload(&g).unwrap());
        let mut xb = guarded(kit, &x);
        kit.gated_add(&mut xb, &yb, rows, d, &gb, 2 * d).unwrap();
        let got = take(kit, &xb, rows * d, "gated_add");
        assert_close(&got, &want, |_| 1e-6, "gated_add");
    }
}

pub fn grn<B: Backend>(kit: &B) {
    let mut rng = Rng::new(6);
    // A batch of 65,537 items: past a CUDA grid's y limit (65,535).
    for &(batch, n, d) in &[(1, 1, 1), (2, 5, 7), (1, 64, 32), (2, 200, 64), (65_537, 2, 3)] {
        let x = rng.vec(batch * n * d);
        let (gamma, beta) = (rng.vec(d), rng.vec(d));
        let mut want = vec![0.0f64; x.len()];
        for b in 0..batch {
            // The norm runs down the sequence axis n, per channel — not across channels.
            let g: Vec<f64> = (0..d).map(|c| (0..n).map(|t| (x[(b * n + t) * d + c] as f64).powi(2)).sum::<f64>().sqrt()).collect();
            let mean = g.iter().sum::<f64>() / d as f64;
            for t in 0..n {
                for c in 0..d {
                    let i = (b * n + t) * d + c;
                    let xv = x[i] as f64;
                    want[i] = gamma[c] as f64 * (xv * g[c] / (mean + 1e-6)) + beta[c] as f64 + xv;
                }
            }
        }
        let (gb, bb) = (kit.upload(&gamma).unwrap(), kit.upload(&beta).unwrap());
        let mut xb = guarded(kit, &x);
        kit.grn(&mut xb, batch, n, d, &gb, &bb, 1e-6).unwrap();
        let got = take(kit, &xb, x.len(), "grn");
        assert_close(&got, &want, |w| 1e-5 * (1.0 + w.abs()), &format!("grn {batch}×{n}×{d}"));
    }
}

// ── attention plumbing ───────────────────────────────────────────────────────────────────────

/// Interleaved-pair RoPE tables as F5 builds them: angle(p, j) = p / 10000^(2j/hd).
fn rope_tables(n: usize, hd: usize) -> (Vec<f32>, Vec<f32>) {
    let half = hd / 2;
    let mut cos = Vec::new();
    let mut sin = Vec::new();
    for p in 0..n {
        for j in 0..half {
            let inv = 1.0 / 10000f32.powf((2 * j) as f32 / hd as f32);
            let a = p as f32 * inv;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    (cos, sin)
}

pub fn split_heads_rope<B: Backend>(kit: &B) {
    let mut rng = Rng::new(7);
    // (batch, n, heads, hd, rope_heads, which of q/k/v inside a fused [rows, 3·width] source)
    for &(batch, n, heads, hd, rope_heads, part) in
        &[(1, 1, 1, 2, 1, 0), (2, 9, 3, 8, 3, 1), (2, 9, 3, 8, 1, 0), (1, 5, 2, 64, 0, 2), (2, 40, 4, 64, 4, 1)]
    {
        let width = heads * hd;
        let src_data = rng.vec(batch * n * 3 * width);
        let (cos, sin) = rope_tables(n, hd);
        let spec = RopeSpec { batch, n, heads, head_dim: hd, rope_heads, src: StridedRows { offset: part * width, row_stride: 3 * width } };
        let mut want = vec![0.0f64; batch * heads * n * hd];
        for b in 0..batch {
            for h in 0..heads {
                for p in 0..n {
                    let s = (b * n + p) * 3 * width + part * width + h * hd;
                    let o = ((b * heads + h) * n + p) * hd;
                    for j in 0..hd / 2 {
                        // Pair (2j, 2j+1) rotates together: the GPT-J layout, not half-split.
                        let (x0, x1) = (src_data[s + 2 * j] as f64, src_data[s + 2 * j + 1] as f64);
                        let (c, sn) = if h < rope_heads { (cos[p * hd / 2 + j] as f64, sin[p * hd / 2 + j] as f64) } else { (1.0, 0.0) };
                        want[o + 2 * j] = x0 * c - x1 * sn;
                        want[o + 2 * j + 1] = x1 * c + x0 * sn;
                    }
                }
            }
        }
        let (sb, cb, snb) = (kit.upload(&src_data).unwrap(), kit.upload(&cos).unwrap(), kit.upload(&sin).unwrap());
        let mut out = guarded(kit, &vec![0.0; want.len()]);
        kit.split_heads_rope(&spec, &sb, &cb, &snb, &mut out).unwrap();
        let got = take(kit, &out, want.len(), "split_heads_rope");
        assert_close(&got, &want, |_| 1e-6, &format!("split_heads_rope {spec:?}"));
    }
}

pub fn merge_heads<B: Backend>(kit: &B) {
    let mut rng = Rng::new(8);
    for &(batch, n, heads, hd) in &[(1, 1, 1, 1), (2, 7, 3, 4), (2, 33, 16, 64)] {
        let src = rng.vec(batch * heads * n * hd);
        let mut want = vec![0.0f64; src.len()];
        for b in 0..batch {
            for h in 0..heads {
                for p in 0..n {
                    for t in 0..hd {
                        want[(b * n + p) * heads * hd + h * hd + t] = src[((b * heads + h) * n + p) * hd + t] as f64;
                    }
                }
            }
        }
        let sb = kit.upload(&src).unwrap();
        let mut out = guarded(kit, &vec![0.0; src.len()]);
        kit.merge_heads(&sb, batch, n, heads, hd, &mut out).unwrap();
        let got = take(kit, &out, src.len(), "merge_heads");
        assert_close(&got, &want, |_| 0.0, "merge_heads is a permutation");
    }
}

// ── convolution ──────────────────────────────────────────────────────────────────────────────

/// The padded input position `p` read from an input of `n` rows with `left` rows of padding.
fn ref_pad_source(mode: PadMode, p: isize, left: usize, n: usize) -> Option<usize> {
    let i = p - left as isize;
    let n = n as isize;
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    match mode {
        PadMode::Zeros => None,
        PadMode::Reflect => Some(if i < 0 { -i } else { 2 * (n - 1) - i } as usize),
        PadMode::Replicate => Some(if i < 0 { 0 } else { n - 1 } as usize),
    }
}

fn ref_conv(s: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let (cin_g, cout_g) = (s.c_in / s.groups, s.c_out / s.groups);
    let n_out = (s.n + 2 * s.pad - s.dilation * (s.kernel - 1) - 1) / s.stride + 1;
    assert_eq!(n_out, s.n_out(), "n_out of {s:?}");
    let mut y = vec![0.0f64; s.batch * n_out * s.c_out];
    for b in 0..s.batch {
        for t in 0..n_out {
            for co in 0..s.c_out {
                let g = co / cout_g;
                let mut acc = bias.map_or(0.0, |bv| bv[co] as f64);
                for ci in 0..cin_g {
                    for k in 0..s.kernel {
                        let p = (t * s.stride + k * s.dilation) as isize;
                        if let Some(src) = ref_pad_source(s.pad_mode, p, s.pad, s.n) {
                            acc += w[(co * cin_g + ci) * s.kernel + k] as f64 * x[(b * s.n + src) * s.c_in + g * cin_g + ci] as f64;
                        }
                    }
                }
                y[(b * n_out + t) * s.c_out + co] = acc;
            }
        }
    }
    y
}

pub fn conv1d<B: Backend>(kit: &B) {
    let mut rng = Rng::new(9);
    let c = |batch, n, c_in, c_out, kernel, pad, groups| Conv1dSpec::new(batch, n, c_in, c_out, kernel).pad(pad).groups(groups);
    let cases = [
        // depthwise k=7 (ConvNeXt), including sequences shorter than the kernel
        c(1, 1, 5, 5, 7, 3, 5),
        c(2, 2, 5, 5, 7, 3, 5),
        c(2, 19, 24, 24, 7, 3, 24),
        // grouped k=31, 4 groups of 8 (the position embedding's shape, scaled down)
        c(2, 40, 32, 32, 31, 15, 4),
        c(1, 10, 32, 32, 31, 15, 4),
        c(1, 50, 64, 64, 31, 15, 16),
        // dense k=7 (Vocos' input conv), and no padding (shorter output)
        c(2, 23, 10, 12, 7, 3, 1),
        c(1, 12, 6, 4, 3, 0, 1),
        // grouped with a channel multiplier
        c(1, 9, 4, 8, 3, 1, 2),
        // Kokoro: dilated resblock convs (k 3/7/11, dilation 3/5, "same" padding), strided
        // F0/N convs (k3 s2 p1) and noise convs (k12 s6 p3), a kernel past 64 taps
        c(1, 40, 16, 16, 3, 3, 1).dilation(3),
        c(2, 33, 8, 8, 7, 15, 1).dilation(5),
        c(1, 30, 6, 6, 11, 25, 6).dilation(5),
        c(1, 17, 1, 1, 3, 1, 1).stride(2),
        c(1, 61, 22, 16, 12, 3, 1).stride(6),
        c(2, 80, 3, 4, 70, 35, 1),
        c(1, 90, 4, 4, 67, 0, 4).stride(3).dilation(1),
        // reflect and replicate padding, plain and depthwise
        c(1, 9, 5, 3, 5, 2, 1).pad_mode(PadMode::Reflect),
        c(2, 6, 4, 4, 3, 1, 4).pad_mode(PadMode::Reflect).stride(2),
        c(1, 7, 3, 2, 4, 3, 1).pad_mode(PadMode::Replicate).dilation(2),
    ];
    for spec in cases {
        let w_len = spec.c_out * spec.c_in / spec.groups * spec.kernel;
        let terms = (spec.kernel * spec.c_in / spec.groups) as f64;
        check_filters_as_buffer_and_weight(
            kit,
            &mut rng,
            [spec.batch * spec.n * spec.c_in, w_len, spec.c_out],
            terms,
            Some(&spec),
            &format!("conv1d {spec:?}"),
            |x, w, bias| ref_conv(&spec, x, w, bias),
            |x, w, bias, y| kit.conv1d(&spec, x, w, bias, y).unwrap(),
        );
    }
}

// ── elementwise ──────────────────────────────────────────────────────────────────────────────

/// erf in f64 from its Maclaurin series (|x| < 3) and the erfc continued fraction beyond.
fn erf64(x: f64) -> f64 {
    if x.abs() < 3.0 {
        let (mut sum, mut term, mut n) = (0.0, x, 0.0);
        while term.abs() > 1e-17 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let a = x.abs();
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        (1.0 - (-a * a).exp() / f / std::f64::consts::PI.sqrt()).copysign(x)
    }
}

fn ref_activation(act: Activation, x: f64) -> f64 {
    match act {
        Activation::GeluErf => 0.5 * x * (1.0 + erf64(x / std::f64::consts::SQRT_2)),
        Activation::GeluTanh => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh()),
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Mish => {
            let sp = if x > 20.0 { x } else { x.exp().ln_1p() };
            x * sp.tanh()
        }
        Activation::LeakyRelu(slope) => {
            if x >= 0.0 {
                x
            } else {
                x * slope as f64
            }
        }
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Activation::Tanh => x.tanh(),
        Activation::Sin => x.sin(),
        Activation::Exp => x.exp(),
        Activation::Scale(a) => x * a as f64,
    }
}

pub fn activations<B: Backend>(kit: &B) {
    let mut rng = Rng::new(10);
    let mut x: Vec<f32> = rng.vec(4099).iter().map(|v| v * 10.0).collect();
    x.extend([0.0, -0.0, 1e-8, -1e-8, 25.0, -25.0, 88.0, -88.0, -3.0]);
    let acts = [
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Mish,
        Activation::LeakyRelu(0.2),
        Activation::LeakyRelu(0.01),
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Sin,
        Activation::Exp,
        Activation::Scale(std::f32::consts::FRAC_1_SQRT_2),
    ];
    for act in acts {
        // exp overflows f32 past 88.7: those inputs test the others only.
        let x: Vec<f32> = if act == Activation::Exp { x.iter().map(|v| v.clamp(-80.0, 80.0)).collect() } else { x.clone() };
        let want: Vec<f64> = x.iter().map(|&v| ref_activation(act, v as f64)).collect();
        let mut b = guarded(kit, &x);
        kit.activation(act, &mut b, x.len()).unwrap();
        let got = take(kit, &b, x.len(), "activation");
        // exp/tanh/erf approximations carry ≤ 3e-7 absolute error, scaled by |x|/2 in the output.
        assert_close(&got, &want, |w| 1e-6 * (1.0 + w.abs()), &format!("{act:?}"));
    }
    // The two GELUs are different functions; at x = −3 they differ by 4e-4, far above tolerance.
    let d = ref_activation(Activation::GeluErf, -3.0) - ref_activation(Activation::GeluTanh, -3.0);
    assert!(d.abs() > 1e-4);
}

pub fn cfg_combine<B: Backend>(kit: &B) {
    let mut rng = Rng::new(11);
    for &half in &[1usize, 100, 2 * 100 * 37] {
        let pred = rng.vec(2 * half);
        let want: Vec<f64> = (0..half).map(|i| pred[i] as f64 + (pred[i] as f64 - pred[half + i] as f64) * 2.0).collect();
        let pb = kit.upload(&pred).unwrap();
        let mut out = guarded(kit, &vec![0.0; half]);
        kit.cfg_combine(&pb, half, 2.0, &mut out).unwrap();
        let got = take(kit, &out, half, "cfg_combine");
        assert_close(&got, &want, |_| 1e-6, "cfg_combine: the conditional row comes first");
    }
}

pub fn axpy<B: Backend>(kit: &B) {
    let mut rng = Rng::new(12);
    for &len in &[1usize, 17, 100_003] {
        let (x, y) = (rng.vec(len), rng.vec(len));
        let want: Vec<f64> = (0..len).map(|i| y[i] as f64 + 0.37 * x[i] as f64).collect();
        let xb = kit.upload(&x).unwrap();
        let mut yb = guarded(kit, &y);
        kit.axpy(0.37, &xb, &mut yb, len).unwrap();
        assert_close(&take(kit, &yb, len, "axpy"), &want, |_| 1e-6, "axpy");
    }
}

/// Host-side work runs once, returns its value, and its parallel iterators complete on the
/// backend's threads (`cpu_pools_run_host_work` checks which threads those are).
pub fn on_host_threads<B: Backend>(kit: &B) {
    use rayon::prelude::*;
    let mut calls = 0;
    let (sum, threads) = kit.on_host_threads(|| {
        calls += 1;
        ((0..100_000u64).into_par_iter().map(|i| i * i).sum::<u64>(), rayon::current_num_threads())
    });
    assert_eq!(calls, 1, "on_host_threads ran its work {calls} times");
    assert_eq!(sum, (0..100_000u64).map(|i| i * i).sum::<u64>(), "on_host_threads: a parallel sum inside it");
    assert!(threads >= 1);
}

/// The CPU backends run host work on their own pool, so a model's host-side passes use the
/// thread count the user gave (`--threads`), not rayon's global pool.
#[test]
fn cpu_pools_run_host_work() {
    for threads in [1, 3] {
        let kit = f5_gpukit::CpuBackend::with_threads(threads).unwrap();
        assert_eq!(kit.on_host_threads(rayon::current_num_threads), threads, "CpuBackend::with_threads({threads})");
        if let Ok(kit) = f5_gpukit::CpuBf16Backend::with_threads(threads) {
            assert_eq!(kit.on_host_threads(rayon::current_num_threads), threads, "CpuBf16Backend::with_threads({threads})");
        }
    }
}

/// A fresh buffer is all zeros at every size, on both sides of the length from which the CPU
/// backend zeroes on all its threads, and also where the allocator hands back memory that a
/// dropped buffer left dirty (where the parallel zeroing skipped a chunk, its old values show).
#[test]
fn cpu_alloc_is_zeroed_at_every_size() {
    for threads in [1, 2, 3] {
        let kit = f5_gpukit::CpuBackend::with_threads(threads).unwrap();
        for len in [0, 1, 1000, (1 << 18) - 1, 1 << 18, (1 << 18) + 17, 3_000_001] {
            for _ in 0..2 {
                let mut buf = kit.alloc(len).unwrap();
                assert_eq!(buf.len(), len);
                assert!(buf.iter().all(|&v| v == 0.0), "{threads} threads, {len} values: a fresh buffer holds non-zeros");
                buf.fill(1.5);
                drop(buf);
            }
        }
    }
}

pub fn mask_rows<B: Backend>(kit: &B) {
    let mut rng = Rng::new(13);
    let (rows, d) = (9, 5);
    let x = rng.vec(rows * d);
    let keep: Vec<f32> = (0..rows).map(|r| if r % 3 == 1 { 0.0 } else { 1.0 }).collect();
    let want: Vec<f64> = (0..rows * d).map(|i| if keep[i / d] == 0.0 { 0.0 } else { x[i] as f64 }).collect();
    let kb = kit.upload(&keep).unwrap();
    let mut xb = guarded(kit, &x);
    kit.mask_rows(&mut xb, rows, d, &kb).unwrap();
    assert_close(&take(kit, &xb, rows * d, "mask_rows"), &want, |_| 0.0, "mask_rows");
}

pub fn concat_features<B: Backend>(kit: &B) {
    let mut rng = Rng::new(14);
    let rows = 6;
    let widths = [100usize, 100, 32];
    let parts: Vec<Vec<f32>> = widths.iter().map(|&w| rng.vec(rows * w)).collect();
    let total: usize = widths.iter().sum();
    let mut want = Vec::new();
    for r in 0..rows {
        for (p, &w) in parts.iter().zip(&widths) {
            want.extend(p[r * w..(r + 1) * w].iter().map(|&v| v as f64));
        }
    }
    let bufs: Vec<B::Buf> = parts.iter().map(|p| kit.upload(p).unwrap()).collect();
    let refs: Vec<(&B::Buf, usize)> = bufs.iter().zip(widths).collect();
    let mut out = guarded(kit, &vec![0.0; rows * total]);
    kit.concat_features(&refs, rows, &mut out).unwrap();
    assert_close(&take(kit, &out, rows * total, "concat"), &want, |_| 0.0, "concat_features");
}

pub fn split_features<B: Backend>(kit: &B) {
    let mut rng = Rng::new(24);
    // Rows past two of the CPU's 2,048-row blocks, the last one partial.
    let rows = 4_100;
    let widths = [11usize, 11, 0, 32];
    let total: usize = widths.iter().sum();
    let x = rng.vec(rows * total);
    let xb = kit.upload(&x).unwrap();
    let mut outs: Vec<B::Buf> = widths.iter().map(|&w| guarded(kit, &vec![0.0; rows * w])).collect();
    let mut parts: Vec<(&mut B::Buf, usize)> = outs.iter_mut().zip(widths).collect();
    kit.split_features(&xb, rows, &mut parts).unwrap();
    let mut at = 0;
    for (out, &w) in outs.iter().zip(&widths) {
        let want: Vec<f64> = (0..rows).flat_map(|r| x[r * total + at..r * total + at + w].iter().map(|&v| v as f64)).collect();
        assert_close(&take(kit, out, rows * w, "split"), &want, |_| 0.0, "split_features");
        at += w;
    }
    // The inverse of concat_features: the parts put back together are the input.
    let refs: Vec<(&B::Buf, usize)> = outs.iter().zip(widths).collect();
    let mut back = guarded(kit, &vec![0.0; rows * total]);
    kit.concat_features(&refs, rows, &mut back).unwrap();
    assert_close(&take(kit, &back, rows * total, "split, concat"), &f64s(&x), |_| 0.0, "split then concat");
    // A part too short for its width is refused before anything is written: the first part,
    // which has room, is left as it was too.
    let mut first = kit.upload(&vec![7.0; rows * 11]).unwrap();
    let mut short = kit.upload(&vec![7.0; rows * 10]).unwrap();
    let err = kit.split_features(&xb, rows, &mut [(&mut first, 11), (&mut short, 43)]).unwrap_err().to_string();
    assert!(err.contains("split_features") && err.contains("part 1"), "{err}");
    assert_eq!(kit.download(&first).unwrap(), vec![7.0; rows * 11]);
    assert_eq!(kit.download(&short).unwrap(), vec![7.0; rows * 10]);
}

pub fn embedding<B: Backend>(kit: &B) {
    let mut rng = Rng::new(15);
    let (vocab, dim) = (11, 6);
    let table = rng.vec(vocab * dim);
    let ids = [0u32, 10, 3, 3, 0];
    let want: Vec<f64> = ids.iter().flat_map(|&i| table[i as usize * dim..(i as usize + 1) * dim].iter().map(|&v| v as f64)).collect();
    let tb = kit.upload(&table).unwrap();
    let mut out = guarded(kit, &vec![0.0; ids.len() * dim]);
    kit.embedding(&tb, dim, &ids, &mut out).unwrap();
    assert_close(&take(kit, &out, ids.len() * dim, "embedding"), &want, |_| 0.0, "embedding");
    let err = kit.embedding(&tb, dim, &[11], &mut out).unwrap_err().to_string();
    assert!(err.contains("id 11"), "{err}");
}

pub fn polar_spectrum<B: Backend>(kit: &B) {
    let mut rng = Rng::new(16);
    let (frames, bins) = (7, 513);
    let mut h: Vec<f32> = rng.vec(frames * 2 * bins).iter().map(|v| v * 6.0).collect();
    h[3] = 12.0; // exp(12) ≈ 1.6e5: must be clipped to 100
    h[5] = 200.0; // exp overflows f32: still clipped to 100, not inf/NaN
    let mut want_re = Vec::new();
    let mut want_im = Vec::new();
    for f in 0..frames {
        for j in 0..bins {
            let mag = (h[f * 2 * bins + j] as f64).exp().min(100.0);
            let p = h[f * 2 * bins + bins + j] as f64;
            want_re.push(mag * p.cos());
            want_im.push(mag * p.sin());
        }
    }
    let hb = kit.upload(&h).unwrap();
    let mut re = guarded(kit, &vec![0.0; frames * bins]);
    let mut im = guarded(kit, &vec![0.0; frames * bins]);
    kit.polar_spectrum(&hb, frames, bins, 100.0, &mut re, &mut im).unwrap();
    // libm exp/sin/cos in f32: ~1 ulp, relative to magnitudes up to 100.
    assert_close(&take(kit, &re, frames * bins, "re"), &want_re, |w| 1e-6 * (1.0 + w.abs()) + 2e-5, "polar re");
    assert_close(&take(kit, &im, frames * bins, "im"), &want_im, |w| 1e-6 * (1.0 + w.abs()) + 2e-5, "polar im");
}

// ── transposed convolution ───────────────────────────────────────────────────────────────────

fn ref_conv_transpose(s: &ConvTranspose1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let (cin_g, cout_g) = (s.c_in / s.groups, s.c_out / s.groups);
    let n_out = (s.n - 1) * s.stride + s.kernel + s.output_padding - 2 * s.pad;
    assert_eq!(n_out, s.n_out(), "n_out of {s:?}");
    let mut y = vec![0.0f64; s.batch * n_out * s.c_out];
    for b in 0..s.batch {
        for o in 0..n_out {
            for co in 0..s.c_out {
                y[(b * n_out + o) * s.c_out + co] = bias.map_or(0.0, |bv| bv[co] as f64);
            }
        }
        for i in 0..s.n {
            for ci in 0..s.c_in {
                let g = ci / cin_g;
                for col in 0..cout_g {
                    for k in 0..s.kernel {
                        let o = (i * s.stride + k) as isize - s.pad as isize;
                        if o >= 0 && (o as usize) < n_out {
                            let co = g * cout_g + col;
                            y[(b * n_out + o as usize) * s.c_out + co] +=
                                x[(b * s.n + i) * s.c_in + ci] as f64 * w[(ci * cout_g + col) * s.kernel + k] as f64;
                        }
                    }
                }
            }
        }
    }
    y
}

pub fn conv_transpose1d<B: Backend>(kit: &B) {
    let mut rng = Rng::new(21);
    let cases = [
        // Kokoro's upsamplers scaled down: k20 s10 p5 and k12 s6 p3, dense
        ConvTranspose1dSpec::new(1, 7, 12, 8, 20, 10).pad(5),
        ConvTranspose1dSpec::new(2, 9, 8, 6, 12, 6).pad(3),
        // the AdaIN blocks' depthwise `pool`: k3 s2 p1 output_padding 1, groups = channels
        ConvTranspose1dSpec::new(2, 11, 10, 10, 3, 2).pad(1).output_padding(1).groups(10),
        // grouped with a channel multiplier, no padding, stride 1, a single input row
        ConvTranspose1dSpec::new(1, 5, 6, 9, 4, 1).groups(3),
        ConvTranspose1dSpec::new(1, 1, 3, 2, 5, 2).pad(1),
        ConvTranspose1dSpec::new(1, 13, 4, 4, 2, 3).output_padding(2),
    ];
    for spec in cases {
        let w_len = spec.c_in * spec.c_out / spec.groups * spec.kernel;
        let terms = (spec.kernel * spec.c_in / spec.groups) as f64;
        check_filters_as_buffer_and_weight(
            kit,
            &mut rng,
            [spec.batch * spec.n * spec.c_in, w_len, spec.c_out],
            terms,
            None,
            &format!("conv_transpose1d {spec:?}"),
            |x, w, bias| ref_conv_transpose(&spec, x, w, bias),
            |x, w, bias, y| kit.conv_transpose1d(&spec, x, w, bias, y).unwrap(),
        );
    }
}

/// One convolution case with random input, filters and bias (`lens`), the filters uploaded as a
/// plain buffer, as a weight (`upload_weight`: bf16 on the bf16 CPU backend, where dense
/// convolutions and transposed convolutions then run on the bf16 kernels) and as an int8-capable
/// weight (`upload_weight_int8`: dense convolutions in int8 in that backend's int8 mode) and, for
/// a convolution (`conv`), as filters for its shape (`upload_conv_filters`: packed for the bf16
/// kernel there, a weight's arithmetic) and as int8 filters for it (`upload_conv_filters_int8`:
/// held only in int8 there, the same arithmetic), with and without the bias, against the f64 reference. Each output sums `terms` products of magnitude
/// ≤ 1: f32 errs by ≲ 2e-6 per term in any order; with a bf16 weight both operands may be rounded
/// to bf16 (a product off by < 2⁻⁷ of itself); in int8 each operand is within half a step (1/254
/// of its row's or filter's largest magnitude, ≤ 1) of its value after the filter's bf16
/// rounding, so a product is off by < 1/254 + 1/254 + 2⁻⁹ + 1/254² < 1e-2. A wrong tap or channel
/// is off by O(1).
#[allow(clippy::too_many_arguments)]
fn check_filters_as_buffer_and_weight<B: Backend>(
    kit: &B,
    rng: &mut Rng,
    lens: [usize; 3],
    terms: f64,
    conv: Option<&Conv1dSpec>,
    what: &str,
    reference: impl Fn(&[f32], &[f32], Option<&[f32]>) -> Vec<f64>,
    run: impl Fn(&B::Buf, &B::Buf, Option<&B::Buf>, &mut B::Buf),
) {
    let (x, w, bias) = (rng.vec(lens[0]), rng.vec(lens[1]), rng.vec(lens[2]));
    let (xb, bb) = (kit.upload(&x).unwrap(), kit.upload(&bias).unwrap());
    let conv_filters = conv.map(|_| ["conv filters", "int8 filters"]).into_iter().flatten();
    for upload in ["buffer", "weight", "int8 weight", "compact weight"].into_iter().chain(conv_filters) {
        let wb = match (upload, conv) {
            ("buffer", _) => kit.upload(&w).unwrap(),
            ("weight", _) => kit.upload_weight(&w).unwrap(),
            ("int8 weight", _) => kit.upload_weight_int8(&w).unwrap(),
            ("conv filters", Some(spec)) => kit.upload_conv_filters(&w, spec).unwrap(),
            ("int8 filters", Some(spec)) => kit.upload_conv_filters_int8(&w, spec).unwrap(),
            _ => kit.upload_weight_compact(&w).unwrap(),
        };
        // A compact weight computes in f32 on the values it stores (f16 on the bf16 CPU
        // backend): the reference takes those values, read back, and the f32 bound.
        let w_ref = if upload == "compact weight" { kit.download(&wb).unwrap() } else { w.clone() };
        for with_bias in [true, false] {
            let want = reference(&x, &w_ref, with_bias.then_some(&bias[..]));
            let mut y = guarded(kit, &vec![0.0; want.len()]);
            run(&xb, &wb, with_bias.then_some(&bb), &mut y);
            let got = take(kit, &y, want.len(), what);
            let rounding = match upload {
                "buffer" | "compact weight" => 0.0,
                "weight" | "conv filters" => 2f64.powi(-7) * terms,
                _ => 1e-2 * terms,
            };
            assert_close(&got, &want, |_| 2e-6 * terms + 1e-6 + rounding, &format!("{what} bias={with_bias} filters as {upload}"));
        }
    }
}

// ── LSTM ─────────────────────────────────────────────────────────────────────────────────────

/// One LSTM direction in f64 over `steps` (the positions, in the order they are visited).
fn ref_lstm_dir(gx: &[f32], w_hh: &[f32], h: usize, steps: &[usize], h0: &[f64], c0: &[f64]) -> Vec<(usize, Vec<f64>)> {
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let (mut hs, mut cs) = (h0.to_vec(), c0.to_vec());
    let mut out = Vec::new();
    for &t in steps {
        let g: Vec<f64> =
            (0..4 * h).map(|r| gx[t * 4 * h + r] as f64 + (0..h).map(|j| w_hh[r * h + j] as f64 * hs[j]).sum::<f64>()).collect();
        for j in 0..h {
            cs[j] = sig(g[h + j]) * cs[j] + sig(g[j]) * g[2 * h + j].tanh();
            hs[j] = sig(g[3 * h + j]) * cs[j].tanh();
        }
        out.push((t, hs.clone()));
    }
    out
}

/// Both directions of a bidirectional layer in f64 over a padded batch (`gx[d]`, `w_hh[d]` per
/// direction, zero initial state), `[batch·n, 2·hidden]` with zeros past each item's length.
fn ref_bilstm(gx: &[Vec<f32>], w_hh: &[Vec<f32>], n: usize, h: usize, lengths: &[usize]) -> Vec<f64> {
    let mut want = vec![0.0f64; lengths.len() * n * 2 * h];
    let zeros = vec![0.0; h];
    for (b, &len) in lengths.iter().enumerate() {
        for (d, order) in [(0..len).collect::<Vec<_>>(), (0..len).rev().collect()].into_iter().enumerate() {
            let item = &gx[d][b * n * 4 * h..(b + 1) * n * 4 * h];
            for (t, hs) in ref_lstm_dir(item, &w_hh[d], h, &order, &zeros, &zeros) {
                want[(b * n + t) * 2 * h + d * h..(b * n + t) * 2 * h + (d + 1) * h].copy_from_slice(&hs);
            }
        }
    }
    want
}

/// Runs both directions of a bidirectional layer over a padded batch into `[batch·n, 2·hidden]`.
fn run_bilstm<B: Backend>(kit: &B, batch: usize, n: usize, h: usize, lengths: &[usize], gx: [&B::Buf; 2], whh: [&B::Buf; 2]) -> Vec<f32> {
    let mut out = guarded(kit, &vec![9.0; batch * n * 2 * h]);
    for (d, reverse) in [false, true].into_iter().enumerate() {
        let spec = LstmSpec { batch, n, hidden: h, reverse, out: StridedRows { offset: d * h, row_stride: 2 * h } };
        kit.lstm(&spec, lengths, gx[d], whh[d], None, &mut out).unwrap();
    }
    take(kit, &out, batch * n * 2 * h, "bilstm")
}

pub fn lstm<B: Backend>(kit: &B) {
    let mut rng = Rng::new(22);
    // A padded batch of three with different lengths (one empty), a hidden size past the SIMD
    // width, and a given initial state for one direction.
    let (batch, n, h) = (3, 9, 19);
    let lengths = [9usize, 4, 0];
    let gx: Vec<Vec<f32>> = (0..2).map(|_| rng.vec(batch * n * 4 * h)).collect();
    let whh: Vec<Vec<f32>> = (0..2).map(|_| rng.vec(4 * h * h).iter().map(|v| v * 0.5).collect()).collect();
    let gxb: Vec<B::Buf> = gx.iter().map(|v| kit.upload(v).unwrap()).collect();
    let whb: Vec<B::Buf> = whh.iter().map(|v| kit.upload(v).unwrap()).collect();
    let got = run_bilstm(kit, batch, n, h, &lengths, [&gxb[0], &gxb[1]], [&whb[0], &whb[1]]);
    let want = ref_bilstm(&gx, &whh, n, h, &lengths);
    let zeros = vec![0.0; h];
    // Recurrences of ≤ 9 steps of sums of 19 products; sigmoid/tanh are libm in f32.
    assert_close(&got, &want, |_| 2e-5, "bilstm over a padded batch (positions past each length are 0)");

    // The recurrent weights stored compactly (`upload_weight_compact`): the same recurrence on
    // the values they hold (f16 on the bf16 CPU backend), to the same bound.
    let whc: Vec<B::Buf> = whh.iter().map(|v| kit.upload_weight_compact(v).unwrap()).collect();
    let stored: Vec<Vec<f32>> = whc.iter().map(|b| kit.download(b).unwrap()).collect();
    let got_c = run_bilstm(kit, batch, n, h, &lengths, [&gxb[0], &gxb[1]], [&whc[0], &whc[1]]);
    assert_close(&got_c, &ref_bilstm(&gx, &stored, n, h, &lengths), |_| 2e-5, "bilstm with compact recurrent weights");

    // The seed's fix 2: a reverse direction that runs over the padded buffer (starting on the
    // padding) instead of each item's own last position is wrong for every shorter item — the
    // same assertion must fail for it.
    let mut naive = want.clone();
    let b = 1;
    let order: Vec<usize> = (0..n).rev().collect();
    let item = &gx[1][b * n * 4 * h..(b + 1) * n * 4 * h];
    for (t, hs) in ref_lstm_dir(item, &whh[1], h, &order, &zeros, &zeros) {
        if t < lengths[b] {
            naive[(b * n + t) * 2 * h + h..(b * n + t) * 2 * h + 2 * h].copy_from_slice(&hs);
        }
    }
    let worst = got.iter().zip(&naive).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max);
    assert!(worst > 1e-2, "a naive reverse over padding must differ from the exact one (max |Δ| = {worst:e})");

    // Initial state (h0, c0) for one direction of one item.
    let (h0, c0) = (rng.vec(h), rng.vec(h));
    let (h0b, c0b) = (kit.upload(&h0).unwrap(), kit.upload(&c0).unwrap());
    let spec = LstmSpec { batch: 1, n: 6, hidden: h, reverse: false, out: StridedRows { offset: 0, row_stride: h } };
    let mut out = guarded(kit, &vec![0.0; 6 * h]);
    kit.lstm(&spec, &[6], &gxb[0], &whb[0], Some((&h0b, &c0b)), &mut out).unwrap();
    let got = take(kit, &out, 6 * h, "lstm state0");
    let want: Vec<f64> =
        ref_lstm_dir(&gx[0], &whh[0], h, &(0..6).collect::<Vec<_>>(), &f64s(&h0), &f64s(&c0)).into_iter().flat_map(|(_, hs)| hs).collect();
    assert_close(&got, &want, |_| 2e-5, "lstm with an initial state");

    // A hidden size past one block of threads (600 > 512; Kokoro's is 256), so every thread owns
    // several units and every warp several gate rows; W_hh scaled by 1/√hidden keeps the gates
    // O(1), so f32 sums of 600 products err by ~1e-6.
    let (batch, n, h) = (2, 3, 600);
    let lengths = [3usize, 1];
    let scale = 1.0 / (h as f32).sqrt();
    let gx: Vec<Vec<f32>> = (0..2).map(|_| rng.vec(batch * n * 4 * h)).collect();
    let whh: Vec<Vec<f32>> = (0..2).map(|_| rng.vec(4 * h * h).iter().map(|v| v * scale).collect()).collect();
    let gxb: Vec<B::Buf> = gx.iter().map(|v| kit.upload(v).unwrap()).collect();
    let whb: Vec<B::Buf> = whh.iter().map(|v| kit.upload(v).unwrap()).collect();
    let got = run_bilstm(kit, batch, n, h, &lengths, [&gxb[0], &gxb[1]], [&whb[0], &whb[1]]);
    assert_close(&got, &ref_bilstm(&gx, &whh, n, h, &lengths), |_| 2e-5, "bilstm with hidden 600");
}

// ── instance norm, Snake, resampling, padding, cumsum ─────────────────────────────────────────

pub fn instance_norm<B: Backend>(kit: &B) {
    let mut rng = Rng::new(23);
    // (3, 9, 70): several 32-channel tiles, the last one partial, over several items; (2, 1300,
    // 5): statistics over several blocks of rows, merged (the CPU backend's blocks are 512 rows).
    for &(batch, n, c) in &[(1usize, 1usize, 3usize), (2, 37, 20), (1, 300, 7), (3, 9, 70), (2, 1300, 5)] {
        // An offset per channel: the normalisation must remove it. Offsets stay below 63 (channel
        // index mod 21) so that the f32 mean's rounding (half an ulp, ≤ 2e-6) fits the tolerance.
        let x: Vec<f32> = rng.vec(batch * n * c).iter().enumerate().map(|(i, v)| v + ((i % c) % 21) as f32 * 3.0).collect();
        let (w, bvec, style) = (rng.vec(c), rng.vec(c), rng.vec(batch * 2 * c));
        let (xb, wb, bb, sb) = (kit.upload(&x).unwrap(), kit.upload(&w).unwrap(), kit.upload(&bvec).unwrap(), kit.upload(&style).unwrap());
        let spec = InstanceNormSpec { batch, n, c, eps: 1e-5 };
        for (with_affine, with_style) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut want = vec![0.0f64; batch * n * c];
            for b in 0..batch {
                for j in 0..c {
                    let col: Vec<f64> = (0..n).map(|t| x[(b * n + t) * c + j] as f64).collect();
                    let mean = col.iter().sum::<f64>() / n as f64;
                    let var = col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
                    for t in 0..n {
                        let mut y = (col[t] - mean) / (var + 1e-5).sqrt();
                        if with_affine {
                            y = y * w[j] as f64 + bvec[j] as f64;
                        }
                        if with_style {
                            y = (1.0 + style[b * 2 * c + j] as f64) * y + style[b * 2 * c + c + j] as f64;
                        }
                        want[(b * n + t) * c + j] = y;
                    }
                }
            }
            let mut out = guarded(kit, &vec![0.0; want.len()]);
            kit.instance_norm(&spec, &xb, with_affine.then_some((&wb, &bb)), with_style.then_some(&sb), &mut out).unwrap();
            // Normalised values of magnitude ≲ 4, scaled by ≤ 2 and shifted: a few f32 ulps.
            assert_close(
                &take(kit, &out, want.len(), "instance_norm"),
                &want,
                |_| 2e-5,
                &format!("instance_norm {batch}×{n}×{c} affine={with_affine} style={with_style}"),
            );
        }
    }
}

/// AdaIN + Snake in one call equals the two ops one after the other, bit for bit (each op is
/// checked against its f64 reference above), with and without affine and style, and it refuses
/// an `alpha` shorter than the channels.
pub fn instance_norm_snake<B: Backend>(kit: &B) {
    let mut rng = Rng::new(29);
    for &(batch, n, c) in &[(1usize, 1usize, 3usize), (2, 37, 20), (1, 700, 7)] {
        let x: Vec<f32> = rng.vec(batch * n * c).iter().enumerate().map(|(i, v)| v * 3.0 + (i % c) as f32).collect();
        let (w, bvec, style) = (rng.vec(c), rng.vec(c), rng.vec(batch * 2 * c));
        // α in [0.3, 1.7]: Snake's 1/α stays moderate, as a trained model's.
        let alpha: Vec<f32> = rng.vec(c).iter().map(|v| 1.0 + 0.7 * v).collect();
        let (xb, wb, bb, sb, ab) = (
            kit.upload(&x).unwrap(),
            kit.upload(&w).unwrap(),
            kit.upload(&bvec).unwrap(),
            kit.upload(&style).unwrap(),
            kit.upload(&alpha).unwrap(),
        );
        let spec = InstanceNormSpec { batch, n, c, eps: 1e-5 };
        let len = batch * n * c;
        for (with_affine, with_style) in [(false, false), (true, true), (false, true)] {
            let affine = with_affine.then_some((&wb, &bb));
            let mut apart = kit.alloc(len).unwrap();
            kit.instance_norm(&spec, &xb, affine, with_style.then_some(&sb), &mut apart).unwrap();
            kit.snake(&mut apart, batch * n, c, &ab).unwrap();
            let mut fused = guarded(kit, &vec![0.0; len]);
            kit.instance_norm_snake(&spec, &xb, affine, with_style.then_some(&sb), &ab, &mut fused).unwrap();
            let (apart, fused) = (kit.download(&apart).unwrap(), take(kit, &fused, len, "instance_norm_snake"));
            let differ = apart.iter().zip(&fused).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(
                differ, 0,
                "instance_norm_snake {batch}×{n}×{c} affine={with_affine} style={with_style}: {differ} values differ from the two ops"
            );
        }
        let short = kit.upload(&alpha[..c - 1]).unwrap();
        let mut out = kit.alloc(len).unwrap();
        assert!(kit.instance_norm_snake(&spec, &xb, None, None, &short, &mut out).is_err(), "an alpha of c - 1 values must be refused");
    }
}

/// AdaIN + Snake + convolution in one call equals `instance_norm_snake` then `conv1d`, bit for
/// bit (whatever the backend does with the scratch: it may never write it), with f32 filters,
/// with GEMM-weight filters (`upload_weight`: reduced precision where a backend keeps them so)
/// and with filters uploaded for the convolution (`upload_conv_filters`); the residual form (`_add`) equals those then `axpy`; a convolution over other
/// rows than the norm's is refused.
pub fn instance_norm_snake_conv1d<B: Backend>(kit: &B) {
    let mut rng = Rng::new(31);
    // The last shape takes the f32 CPU backend's FFT path, where it fuses the residual form.
    for &(batch, n, c, c_out, k, dil) in &[(1usize, 9usize, 3usize, 5usize, 3usize, 1usize), (2, 40, 16, 12, 5, 3), (2, 200, 32, 34, 7, 2)]
    {
        let x: Vec<f32> = rng.vec(batch * n * c).iter().enumerate().map(|(i, v)| v * 3.0 + (i % c) as f32).collect();
        let style = rng.vec(batch * 2 * c);
        let alpha: Vec<f32> = rng.vec(c).iter().map(|v| 1.0 + 0.7 * v).collect();
        let (w, bias) = (rng.vec(c_out * c * k), rng.vec(c_out));
        let (xb, sb, ab, bb) =
            (kit.upload(&x).unwrap(), kit.upload(&style).unwrap(), kit.upload(&alpha).unwrap(), kit.upload(&bias).unwrap());
        let norm = InstanceNormSpec { batch, n, c, eps: 1e-5 };
        let conv = Conv1dSpec::new(batch, n, c, c_out, k).dilation(dil).pad(dil * (k - 1) / 2);
        let (len, n_y) = (batch * n * c, batch * conv.n_out() * c_out);
        for wb in [kit.upload(&w).unwrap(), kit.upload_weight(&w).unwrap(), kit.upload_conv_filters(&w, &conv).unwrap()] {
            let (mut t, mut apart) = (kit.alloc(len).unwrap(), kit.alloc(n_y).unwrap());
            kit.instance_norm_snake(&norm, &xb, None, Some(&sb), &ab, &mut t).unwrap();
            kit.conv1d(&conv, &t, &wb, Some(&bb), &mut apart).unwrap();
            let mut scratch = kit.alloc(len).unwrap();
            let mut fused = guarded(kit, &vec![0.0; n_y]);
            kit.instance_norm_snake_conv1d(&norm, &xb, None, Some(&sb), &ab, &conv, &wb, Some(&bb), &mut scratch, &mut fused).unwrap();
            let (apart, fused) = (kit.download(&apart).unwrap(), take(kit, &fused, n_y, "instance_norm_snake_conv1d"));
            let differ = apart.iter().zip(&fused).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(
                differ, 0,
                "instance_norm_snake_conv1d {batch}×{n}×{c} → {c_out} k{k} d{dil}: {differ} values differ from the two ops"
            );
        }
        // The residual form: y + conv(...), equal to the two ops then axpy (here c_out ≠ c, so
        // x and the scratch are given room for the output).
        let room = len.max(n_y);
        let mut padded_x = x.clone();
        padded_x.resize(room, 0.0);
        let y0 = rng.vec(n_y);
        for wb in [kit.upload(&w).unwrap(), kit.upload_weight(&w).unwrap(), kit.upload_conv_filters(&w, &conv).unwrap()] {
            let (mut t, mut out) = (kit.alloc(len).unwrap(), kit.alloc(n_y).unwrap());
            kit.instance_norm_snake(&norm, &xb, None, Some(&sb), &ab, &mut t).unwrap();
            kit.conv1d(&conv, &t, &wb, Some(&bb), &mut out).unwrap();
            let mut apart = kit.upload(&y0).unwrap();
            kit.axpy(1.0, &out, &mut apart, n_y).unwrap();
            let (mut consumed, mut scratch) = (kit.upload(&padded_x).unwrap(), kit.alloc(room).unwrap());
            let mut fused = guarded(kit, &y0);
            kit.instance_norm_snake_conv1d_add(&norm, &mut consumed, None, Some(&sb), &ab, &conv, &wb, Some(&bb), &mut scratch, &mut fused)
                .unwrap();
            let (apart, fused) = (kit.download(&apart).unwrap(), take(kit, &fused, n_y, "instance_norm_snake_conv1d_add"));
            let differ = apart.iter().zip(&fused).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(differ, 0, "instance_norm_snake_conv1d_add {batch}×{n}×{c} → {c_out}: {differ} values differ from the three ops");
        }
        let other = Conv1dSpec { n: n + 1, ..conv };
        let (mut t, mut y) = (kit.alloc(len + c).unwrap(), kit.alloc(batch * other.n_out() * c_out).unwrap());
        let wb = kit.upload(&w).unwrap();
        assert!(
            kit.instance_norm_snake_conv1d(&norm, &xb, None, Some(&sb), &ab, &other, &wb, Some(&bb), &mut t, &mut y).is_err(),
            "a convolution over {} rows after a norm over {n} must be refused",
            n + 1
        );
        let mut consumed = kit.upload(&padded_x).unwrap();
        assert!(
            kit.instance_norm_snake_conv1d_add(&norm, &mut consumed, None, Some(&sb), &ab, &other, &wb, Some(&bb), &mut t, &mut y).is_err(),
            "the residual form must refuse it too"
        );
    }
}

pub fn snake<B: Backend>(kit: &B) {
    let mut rng = Rng::new(24);
    let (rows, c) = (37, 21);
    let x: Vec<f32> = rng.vec(rows * c).iter().map(|v| v * 4.0).collect();
    let alpha: Vec<f32> = rng.vec(c).iter().map(|v| v * 2.0 + 2.5).collect();
    let want: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let a = alpha[i % c] as f64;
            v as f64 + (a * v as f64).sin().powi(2) / a
        })
        .collect();
    let ab = kit.upload(&alpha).unwrap();
    let mut xb = guarded(kit, &x);
    kit.snake(&mut xb, rows, c, &ab).unwrap();
    assert_close(&take(kit, &xb, rows * c, "snake"), &want, |w| 1e-6 * (1.0 + w.abs()), "snake");
}

pub fn upsample_nearest<B: Backend>(kit: &B) {
    let mut rng = Rng::new(25);
    for &(batch, n, c, factor) in &[(2usize, 5usize, 3usize, 2usize), (1, 4, 1, 300), (1, 3, 7, 1)] {
        let x = rng.vec(batch * n * c);
        let want: Vec<f64> = (0..batch * n * factor * c)
            .map(|i| {
                let (r, j) = (i / c, i % c);
                let (b, t) = (r / (n * factor), r % (n * factor));
                x[(b * n + t / factor) * c + j] as f64
            })
            .collect();
        let xb = kit.upload(&x).unwrap();
        let mut out = guarded(kit, &vec![0.0; want.len()]);
        kit.upsample_nearest(&xb, batch, n, c, factor, &mut out).unwrap();
        assert_close(&take(kit, &out, want.len(), "upsample_nearest"), &want, |_| 0.0, "upsample_nearest");
    }
}

pub fn interpolate_linear<B: Backend>(kit: &B) {
    let mut rng = Rng::new(26);
    // SineGen's 1/300 downsample and ×300 upsample, and plain up/down scalings.
    let cases = [
        InterpolateSpec::by_scale(1, 1200, 9, 1.0 / 300.0),
        InterpolateSpec::by_scale(1, 4, 9, 300.0),
        // 3,000 output rows: the CPU backend's 1,024-row tasks, with the second item starting
        // inside one of them.
        InterpolateSpec::by_scale(2, 5, 9, 300.0),
        InterpolateSpec::by_scale(2, 7, 3, 2.0),
        InterpolateSpec::by_scale(1, 10, 2, 0.5),
        InterpolateSpec { batch: 1, n_in: 5, n_out: 3, c: 2, ratio: 5.0 / 3.0 },
    ];
    for spec in cases {
        let InterpolateSpec { batch, n_in, n_out, c, ratio } = spec;
        let x = rng.vec(batch * n_in * c);
        let mut want = vec![0.0f64; batch * n_out * c];
        for b in 0..batch {
            for t in 0..n_out {
                let src = ((t as f64 + 0.5) * ratio as f64 - 0.5).max(0.0);
                let i0 = (src.floor() as usize).min(n_in - 1);
                let i1 = (i0 + 1).min(n_in - 1);
                let l = src - i0 as f64;
                for j in 0..c {
                    want[(b * n_out + t) * c + j] = (1.0 - l) * x[(b * n_in + i0) * c + j] as f64 + l * x[(b * n_in + i1) * c + j] as f64;
                }
            }
        }
        let xb = kit.upload(&x).unwrap();
        let mut out = guarded(kit, &vec![0.0; want.len()]);
        kit.interpolate_linear(&spec, &xb, &mut out).unwrap();
        // The source position is computed in f32 as PyTorch does: λ carries ≲ 1e-7·n relative error.
        assert_close(&take(kit, &out, want.len(), "interpolate"), &want, |_| 2e-6, &format!("interpolate_linear {spec:?}"));
    }
    assert_eq!(InterpolateSpec::by_scale(1, 1200, 1, 1.0 / 300.0).n_out, 4);
    assert_eq!(InterpolateSpec::by_scale(1, 4, 1, 300.0).n_out, 1200);
}

pub fn pad1d<B: Backend>(kit: &B) {
    let mut rng = Rng::new(27);
    for mode in [PadMode::Zeros, PadMode::Reflect, PadMode::Replicate] {
        // ISTFTNet's ReflectionPad1d((1, 0)), and a wider two-sided pad.
        for &(batch, n, c, left, right) in &[(1usize, 6usize, 3usize, 1usize, 0usize), (2, 5, 2, 4, 3)] {
            let spec = Pad1dSpec { batch, n, c, left, right, mode };
            let x = rng.vec(batch * n * c);
            let n_out = n + left + right;
            let mut want = vec![0.0f64; batch * n_out * c];
            for b in 0..batch {
                for p in 0..n_out {
                    if let Some(s) = ref_pad_source(mode, p as isize, left, n) {
                        for j in 0..c {
                            want[(b * n_out + p) * c + j] = x[(b * n + s) * c + j] as f64;
                        }
                    }
                }
            }
            let xb = kit.upload(&x).unwrap();
            let mut out = guarded(kit, &vec![1.0; want.len()]);
            kit.pad1d(&spec, &xb, &mut out).unwrap();
            assert_close(&take(kit, &out, want.len(), "pad1d"), &want, |_| 0.0, &format!("pad1d {spec:?}"));
        }
    }
    // PyTorch: reflection needs pad < n.
    let spec = Pad1dSpec { batch: 1, n: 3, c: 1, left: 3, right: 0, mode: PadMode::Reflect };
    let (x, mut out) = (kit.upload(&[1.0; 3]).unwrap(), kit.upload(&[0.0; 6]).unwrap());
    assert!(kit.pad1d(&spec, &x, &mut out).unwrap_err().to_string().contains("reflect"));
}

pub fn cumsum<B: Backend>(kit: &B) {
    let mut rng = Rng::new(28);
    // A long positive track, like SineGen's phase: 60,000 rows of values in [0, 2).
    let (batch, n, c) = (2, 60_000, 3);
    let x: Vec<f32> = rng.vec(batch * n * c).iter().map(|v| v + 1.0).collect();
    let mut want = vec![0.0f64; x.len()];
    for b in 0..batch {
        for j in 0..c {
            let mut acc = 0.0f64;
            for t in 0..n {
                acc += x[(b * n + t) * c + j] as f64;
                want[(b * n + t) * c + j] = acc;
            }
        }
    }
    let xb = kit.upload(&x).unwrap();
    let mut out = guarded(kit, &vec![0.0; x.len()]);
    kit.cumsum(&xb, batch, n, c, &mut out).unwrap();
    let got = take(kit, &out, x.len(), "cumsum");
    // Accumulated in f64 and rounded once: within half an f32 ulp of the exact running sum.
    // (An f32's ulp is at most ε·|x|, so half an ulp is at most ε·|x|/2.)
    let half_ulp = |w: f64| f32::EPSILON as f64 * w.abs() * 0.5 + 1e-30;
    assert_close(&got, &want, half_ulp, "cumsum (f64 accumulation)");
    // An f32 running sum drifts far past that on the same track, so the tolerance can tell.
    let mut acc = 0.0f32;
    let worst = (0..n).map(|t| {
        acc += x[t * c];
        (acc as f64 - want[t * c]).abs() / half_ulp(want[t * c])
    });
    assert!(worst.fold(0.0, f64::max) > 10.0, "an f32 running sum must miss the f64-accumulated one");
}

// ── STFT ─────────────────────────────────────────────────────────────────────────────────────

fn ref_hann(n_fft: usize) -> Vec<f64> {
    (0..n_fft).map(|t| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * t as f64 / n_fft as f64).cos()).collect()
}

pub fn stft<B: Backend>(kit: &B) {
    let mut rng = Rng::new(29);
    // The last shapes span several of the CPU kernel's parallel blocks of frames (1,024 each).
    for &(batch, samples, n_fft, hop) in
        &[(1usize, 300usize, 20usize, 5usize), (2, 63, 8, 3), (1, 11, 4, 4), (1, 30_003, 20, 5), (2, 6_200, 8, 3)]
    {
        let spec = StftSpec::for_samples(batch, samples, n_fft, hop);
        let samples_used = spec.samples();
        let mut x = rng.vec(batch * samples_used);
        // A negative mean makes the DC bin of the first frame negative: its phase must be +π exactly.
        x.iter_mut().for_each(|v| *v -= 0.6);
        let (bins, frames, half) = (spec.bins(), spec.frames, n_fft / 2);
        let win = ref_hann(n_fft);
        let (mut want_m, mut want_p) = (Vec::new(), Vec::new());
        for b in 0..batch {
            for f in 0..frames {
                for k in 0..bins {
                    let (mut re, mut im) = (0.0f64, 0.0f64);
                    for t in 0..n_fft {
                        let s = ref_pad_source(PadMode::Reflect, (f * hop + t) as isize, half, samples_used).unwrap();
                        let v = x[b * samples_used + s] as f64 * win[t];
                        let a = 2.0 * std::f64::consts::PI * (k * t) as f64 / n_fft as f64;
                        re += v * a.cos();
                        im -= v * a.sin();
                    }
                    if k == 0 || k == half {
                        im = 0.0;
                    }
                    want_m.push(re.hypot(im));
                    want_p.push(im.atan2(re));
                }
            }
        }
        let xb = kit.upload(&x).unwrap();
        let mut mag = guarded(kit, &vec![0.0; want_m.len()]);
        let mut phase = guarded(kit, &vec![0.0; want_m.len()]);
        kit.stft(&spec, &xb, &mut mag, &mut phase).unwrap();
        let (gm, gp) = (take(kit, &mag, want_m.len(), "stft mag"), take(kit, &phase, want_m.len(), "stft phase"));
        assert_close(&gm, &want_m, |w| 1e-6 * (1.0 + w.abs()), "stft magnitude");
        // Phase is ill-conditioned only where the magnitude is tiny; these inputs have none.
        for (i, (&g, &w)) in gp.iter().zip(&want_p).enumerate() {
            let d = (g as f64 - w).abs();
            let d = d.min((d - 2.0 * std::f64::consts::PI).abs());
            assert!(d < 1e-4 * (1.0 + 1.0 / want_m[i]), "stft phase {i}: got {g}, want {w}");
        }
        for (i, &p) in gp.iter().enumerate() {
            let k = i % bins;
            if k == 0 || k == half {
                assert!(p == 0.0 || p == std::f32::consts::PI, "DC/Nyquist phase must be exactly 0 or +π, got {p}");
            }
        }
        assert_eq!(gp[0], std::f32::consts::PI, "the negative DC bin has phase +π (never −π)");
    }
}

pub fn istft<B: Backend>(kit: &B) {
    let mut rng = Rng::new(30);
    // The last shapes span several of the CPU kernel's parallel blocks of samples (8,192 each),
    // whose edge frames straddle two blocks.
    for &(batch, frames, n_fft, hop) in
        &[(1usize, 41usize, 20usize, 5usize), (2, 9, 8, 4), (1, 2, 4, 1), (1, 5_001, 20, 5), (2, 4_000, 8, 3)]
    {
        let spec = StftSpec { batch, frames, n_fft, hop };
        let (bins, samples, half) = (spec.bins(), spec.samples(), n_fft / 2);
        // ISTFTNet's head: magnitude exp(a), phase sin(b).
        let mag: Vec<f32> = rng.vec(batch * frames * bins).iter().map(|v| (v * 2.0).exp()).collect();
        let phase: Vec<f32> = rng.vec(batch * frames * bins).iter().map(|v| (v * 3.0).sin()).collect();
        let win = ref_hann(n_fft);
        let full = n_fft + hop * (frames - 1);
        let (mut want, mut naive) = (Vec::new(), Vec::new());
        for b in 0..batch {
            let (mut ola, mut env, mut ola_naive) = (vec![0.0f64; full], vec![0.0f64; full], vec![0.0f64; full]);
            for f in 0..frames {
                for t in 0..n_fft {
                    let (mut acc, mut acc_naive) = (0.0, 0.0);
                    for k in 0..bins {
                        let (m, p) = (mag[(b * frames + f) * bins + k] as f64, phase[(b * frames + f) * bins + k] as f64);
                        let a = 2.0 * std::f64::consts::PI * (k * t) as f64 / n_fft as f64;
                        let (re, im) = (m * p.cos(), m * p.sin());
                        let w = if k == 0 || k == half { 1.0 } else { 2.0 };
                        // irfft ignores the imaginary part of DC and Nyquist (sin(0) = sin(πt) = 0 there anyway).
                        acc += w * (re * a.cos() - if k == 0 || k == half { 0.0 } else { im * a.sin() });
                        acc_naive += re * a.cos() - im * a.sin();
                    }
                    ola[f * hop + t] += acc / n_fft as f64 * win[t];
                    ola_naive[f * hop + t] += acc_naive / n_fft as f64 * win[t];
                    env[f * hop + t] += win[t] * win[t];
                }
            }
            want.extend((0..samples).map(|i| ola[i + half] / env[i + half]));
            naive.extend((0..samples).map(|i| ola_naive[i + half]));
        }
        let (mb, pb) = (kit.upload(&mag).unwrap(), kit.upload(&phase).unwrap());
        let mut out = guarded(kit, &vec![0.0; want.len()]);
        kit.istft(&spec, &mb, &pb, &mut out).unwrap();
        let got = take(kit, &out, want.len(), "istft");
        let scale = want.iter().fold(0.0f64, |a, &w| a.max(w.abs()));
        assert_close(&got, &want, |_| 1e-6 * scale, &format!("istft {spec:?}"));
        // The conv-basis "inverse" of seed fix 4 (no interior doubling, no envelope division)
        // misses the true one by far more than that.
        let wrong = naive.iter().zip(&got).map(|(&w, &g)| (w - g as f64).abs()).fold(0.0, f64::max);
        assert!(wrong > 1e-2 * scale, "a naive inverse (no doubling, no envelope) must fail the same check: {wrong:e}");
    }
    // A hop past n_fft/2 leaves the Hann² envelope with zeros: refused, as torch.istft refuses.
    let spec = StftSpec { batch: 1, frames: 3, n_fft: 8, hop: 6 };
    let (m, mut out) = (kit.upload(&[1.0; 15]).unwrap(), kit.upload(&[0.0; 12]).unwrap());
    assert!(kit.istft(&spec, &m, &m, &mut out).unwrap_err().to_string().contains("hop"));
}

pub fn buffers<B: Backend>(kit: &B) {
    let mut b = kit.upload_weight(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!(kit.len(&b), 4);
    kit.write(&mut b, 1, &[7.0, 8.0]).unwrap();
    kit.fill(&mut b, 3, 1, -1.0).unwrap();
    let mut part = [0.0f32; 3];
    kit.read(&b, 1, &mut part).unwrap();
    assert_eq!(part, [7.0, 8.0, -1.0]);
    let mut z = kit.alloc(6).unwrap();
    kit.copy(&b, 0, &mut z, 2, 4).unwrap();
    assert_eq!(kit.download(&z).unwrap(), vec![0.0, 0.0, 1.0, 7.0, 8.0, -1.0]);
    assert!(kit.fill(&mut z, 5, 2, 0.0).is_err());
    assert!(kit.read(&z, 4, &mut [0.0; 3]).is_err());
    // A large copy (a backend may split it across threads) between offsets that split no
    // chunk evenly: exactly the span moves, the values around it stay.
    let n = (1 << 19) + 12_345;
    let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let (from, to, len) = (7, 1_001, n - 4_000);
    let sb = kit.upload(&src).unwrap();
    let mut db = kit.upload(&vec![-1.0; n]).unwrap();
    kit.copy(&sb, from, &mut db, to, len).unwrap();
    let got = kit.download(&db).unwrap();
    let want: Vec<f32> = (0..n).map(|i| if (to..to + len).contains(&i) { (i - to + from) as f32 } else { -1.0 }).collect();
    assert!(got == want, "large copy");
    let _ = kit.device();
}

/// Every op refuses a buffer that is too short with an error naming the op, instead of reading
/// or writing out of bounds.
pub fn refuses_short_buffers<B: Backend>(kit: &B) {
    let small = kit.upload(&[0.0; 8]).unwrap();
    let mut out = kit.upload(&[0.0; 8]).unwrap();
    let mut out2 = kit.upload(&[0.0; 8]).unwrap();
    let errors = [
        kit.gemm(&GemmSpec::linear(4, 4, 4), &small, &small, None, &mut out).err(),
        kit.attention(&AttentionSpec { batch_heads: 1, n: 4, head_dim: 4, scale: 1.0 }, &small, &small, &small, &mut out).err(),
        kit.layer_norm(&small, 3, 3, 1e-6, None, &mut out).err(),
        kit.adaln_modulate(&small, 2, 4, 1e-6, &small, 0, 6, &mut out).err(),
        kit.grn(&mut out, 1, 3, 3, &small, &small, 1e-6).err(),
        kit.split_heads_rope(
            &RopeSpec { batch: 1, n: 2, heads: 1, head_dim: 6, rope_heads: 1, src: StridedRows { offset: 0, row_stride: 6 } },
            &small,
            &small,
            &small,
            &mut out,
        )
        .err(),
        kit.merge_heads(&small, 1, 3, 1, 3, &mut out).err(),
        kit.conv1d(&Conv1dSpec::new(1, 5, 2, 2, 3).pad(1).groups(2), &small, &small, None, &mut out).err(),
        kit.activation(Activation::Silu, &mut out, 9).err(),
        kit.cfg_combine(&small, 5, 2.0, &mut out).err(),
        kit.axpy(1.0, &small, &mut out, 9).err(),
        kit.mask_rows(&mut out, 3, 3, &small).err(),
        kit.concat_features(&[(&small, 3)], 3, &mut out).err(),
        kit.split_features(&small, 3, &mut [(&mut out, 3)]).err(),
        kit.polar_spectrum(&small, 1, 5, 100.0, &mut out, &mut out2).err(),
        kit.write(&mut out, 7, &[1.0, 2.0]).err(),
        kit.copy(&small, 4, &mut out, 0, 5).err(),
    ];
    for (i, e) in errors.iter().enumerate() {
        assert!(e.is_some(), "case {i}: a too-short buffer was accepted");
    }
    // Odd head_dim cannot be split into rotation pairs; groups must divide the channels.
    let odd = RopeSpec { batch: 1, n: 1, heads: 1, head_dim: 3, rope_heads: 1, src: StridedRows { offset: 0, row_stride: 3 } };
    assert!(kit.split_heads_rope(&odd, &small, &small, &small, &mut out).is_err());
    let bad_groups = Conv1dSpec::new(1, 2, 3, 3, 1).groups(2);
    assert!(kit.conv1d(&bad_groups, &small, &small, None, &mut out).unwrap_err().to_string().contains("groups"));
}

macro_rules! backend_suite {
    ($name:ident, $make:expr) => {
        backend_suite!($name, $make, AttentionArithmetic::F32);
    };
    ($name:ident, $make:expr, $attention:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn kit() -> Option<impl Backend> {
                $make
            }
            #[test]
            fn attention() {
                match kit() {
                    Some(k) => super::attention(&k, $attention),
                    None => eprintln!("SKIP attention: backend not available"),
                }
            }
            backend_suite!(@tests gemm, layer_norm, adaln_modulate, gated_add, grn, split_heads_rope,
                merge_heads, conv1d, activations, cfg_combine, axpy, mask_rows, concat_features, split_features, embedding,
                polar_spectrum, conv_transpose1d, lstm, instance_norm, instance_norm_snake, instance_norm_snake_conv1d, snake, upsample_nearest, interpolate_linear,
                pad1d, cumsum, stft, istft, on_host_threads, buffers, refuses_short_buffers);
        }
    };
    (@tests $($op:ident),*) => {
        $(
            #[test]
            fn $op() {
                match kit() {
                    Some(k) => super::$op(&k),
                    None => eprintln!("SKIP {}: backend not available", stringify!($op)),
                }
            }
        )*
    };
}

backend_suite!(cpu, Some(f5_gpukit::CpuBackend::new()));
backend_suite!(cpu_one_thread, f5_gpukit::CpuBackend::with_threads(1).ok());

/// The CUDA backend on device 0. Without a usable device every CUDA case prints SKIP and
/// passes, unless `KIT_REQUIRE_GPU=1` (the GPU check), where that is a failure.
#[cfg(feature = "cuda")]
fn cuda_kit() -> Option<f5_gpukit::CudaBackend> {
    match f5_gpukit::CudaBackend::new(0) {
        Ok(kit) => Some(kit),
        Err(e) if std::env::var("KIT_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("KIT_REQUIRE_GPU=1 but the CUDA backend is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("SKIP cuda: {e}");
            None
        }
    }
}

#[cfg(feature = "cuda")]
backend_suite!(cuda, cuda_kit());

/// The table covers the whole trait: a `Backend` method that no case calls fails here, so a new
/// op cannot land without its case (and so without its CUDA twin being exercised).
#[test]
fn every_backend_method_has_a_case() {
    let lib = include_str!("../src/lib.rs");
    let table = include_str!("ops.rs");
    let start = lib.find("pub trait Backend").expect("the Backend trait in lib.rs");
    let body = &lib[start..];
    let end = body.find("\n}\n").expect("end of the Backend trait");
    let methods: Vec<&str> = body[..end]
        .split("fn ")
        .skip(1)
        .filter_map(|rest| rest.split(['(', '<']).next())
        .filter(|name| !name.is_empty() && name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_'))
        .collect();
    assert!(methods.len() >= 30, "found only {methods:?}");
    let missing: Vec<&&str> = methods.iter().filter(|m| !table.contains(&format!("kit.{m}("))).collect();
    assert!(missing.is_empty(), "Backend methods without an op-table case: {missing:?}");
}

// The bf16-weight CPU backend forwards every op but attention and GEMMs on bf16 weights to the
// f32 backend: the whole table runs through it (plain uploads stay f32), attention with its
// bf16 arithmetic where the CPU has AVX-512 BF16.
// Both ways it can compute are run on any such CPU, whichever it would choose there: with the
// bf16 dot products, and with bf16 weights widened for the f32 kernels (attention in f32); a CPU
// without AVX-512 BF16 runs the second only.
backend_suite!(
    cpu_bf16,
    f5_gpukit::CpuBf16Backend::with_threads(0).ok().map(|k| k.with_bf16_dot_products(true)).filter(|k| k.bf16_dot_products()),
    AttentionArithmetic::Bf16
);
backend_suite!(
    cpu_bf16_widened,
    f5_gpukit::CpuBf16Backend::with_threads(0).ok().map(|k| k.with_bf16_dot_products(false)),
    AttentionArithmetic::F32
);

// Its int8 mode: the same table, with dense convolutions on filters uploaded for int8 computed
// in int8 (where the CPU has AVX-512 VNNI), the other bf16 weights either way.
backend_suite!(
    cpu_int8,
    f5_gpukit::CpuBf16Backend::with_int8_convs(0).ok().map(|k| k.with_bf16_dot_products(true)).filter(|k| k.bf16_dot_products()),
    AttentionArithmetic::Bf16
);
backend_suite!(
    cpu_int8_widened,
    f5_gpukit::CpuBf16Backend::with_int8_convs(0).ok().map(|k| k.with_bf16_dot_products(false)),
    AttentionArithmetic::F32
);
