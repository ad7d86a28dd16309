//! The op-case table: every op of the kit on ordinary, odd and edge shapes, against a
//! straightforward f64 reference written here, with guard cells after every output to catch
//! writes past the end. The suite is written once, generic over `Backend`, and instantiated per
//! backend at the bottom; a GPU backend runs the very same cases.
//!
//! Inputs are uniform in [-1, 1] (deterministic), so every reference value is O(1) and an
//! absolute tolerance is meaningful. Each tolerance is stated where it is used, with its reason.

use f5_gpukit::{Activation, AttentionSpec, Backend, Conv1dSpec, GemmSpec, MatLayout, RopeSpec, StridedRows};

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
    for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (17, 33, 65), (64, 64, 64), (130, 257, 95), (2, 712, 128)] {
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

pub fn attention<B: Backend>(kit: &B) {
    let mut rng = Rng::new(2);
    // n = 300 spans several query blocks, the last one partial; n = 1 is a single key.
    for &(bh, n, d, scale) in &[(1, 1, 64, 0.125), (3, 17, 64, 0.125), (2, 300, 64, 0.125), (1, 129, 8, 0.5), (4, 33, 16, 1.0)] {
        let spec = AttentionSpec { batch_heads: bh, n, head_dim: d, scale };
        let len = bh * n * d;
        // Scores up to ~±8 make the softmax far from uniform, so a wrong axis or scale shows.
        let q: Vec<f32> = rng.vec(len).iter().map(|x| x * 2.0).collect();
        let (k, v) = (rng.vec(len), rng.vec(len));
        let want = ref_attention(&spec, &q, &k, &v);
        let (qb, kb, vb) = (kit.upload(&q).unwrap(), kit.upload(&k).unwrap(), kit.upload(&v).unwrap());
        let mut out = guarded(kit, &vec![0.0; len]);
        kit.attention(&spec, &qb, &kb, &vb, &mut out).unwrap();
        let got = take(kit, &out, len, "attention");
        // Outputs are convex combinations of v ∈ [-1, 1]; the fast exp (rel. error 2e-7) and f32
        // sums over n keys keep the error near 1e-6.
        assert_close(&got, &want, |_| 2e-5, &format!("attention {spec:?}"));
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
    for &(batch, n, d) in &[(1, 1, 1), (2, 5, 7), (1, 64, 32), (2, 200, 64)] {
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

fn ref_conv(s: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let (cin_g, cout_g) = (s.c_in / s.groups, s.c_out / s.groups);
    let n_out = s.n_out();
    let mut y = vec![0.0f64; s.batch * n_out * s.c_out];
    for b in 0..s.batch {
        for t in 0..n_out {
            for co in 0..s.c_out {
                let g = co / cout_g;
                let mut acc = bias.map_or(0.0, |bv| bv[co] as f64);
                for ci in 0..cin_g {
                    for k in 0..s.kernel {
                        let src = t as isize + k as isize - s.pad as isize;
                        if src >= 0 && (src as usize) < s.n {
                            acc +=
                                w[(co * cin_g + ci) * s.kernel + k] as f64 * x[(b * s.n + src as usize) * s.c_in + g * cin_g + ci] as f64;
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
    let c = |batch, n, c_in, c_out, kernel, pad, groups| Conv1dSpec { batch, n, c_in, c_out, kernel, pad, groups };
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
    ];
    for spec in cases {
        let x = rng.vec(spec.batch * spec.n * spec.c_in);
        let w = rng.vec(spec.c_out * spec.c_in / spec.groups * spec.kernel);
        let bias = rng.vec(spec.c_out);
        let (xb, wb, bb) = (kit.upload(&x).unwrap(), kit.upload(&w).unwrap(), kit.upload(&bias).unwrap());
        for with_bias in [true, false] {
            let want = ref_conv(&spec, &x, &w, with_bias.then_some(&bias[..]));
            let mut y = guarded(kit, &vec![0.0; want.len()]);
            kit.conv1d(&spec, &xb, &wb, with_bias.then_some(&bb), &mut y).unwrap();
            let got = take(kit, &y, want.len(), "conv1d");
            // Sums of ≤ kernel·c_in/groups (≤ 248) products of magnitude ≤ 1.
            let terms = (spec.kernel * spec.c_in / spec.groups) as f64;
            assert_close(&got, &want, |_| 2e-6 * terms + 1e-6, &format!("conv1d {spec:?} bias={with_bias}"));
        }
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
    }
}

pub fn activations<B: Backend>(kit: &B) {
    let mut rng = Rng::new(10);
    let mut x: Vec<f32> = rng.vec(4099).iter().map(|v| v * 10.0).collect();
    x.extend([0.0, -0.0, 1e-8, -1e-8, 25.0, -25.0, 88.0, -88.0, -3.0]);
    for act in [Activation::GeluErf, Activation::GeluTanh, Activation::Silu, Activation::Mish] {
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
        kit.conv1d(&Conv1dSpec { batch: 1, n: 5, c_in: 2, c_out: 2, kernel: 3, pad: 1, groups: 2 }, &small, &small, None, &mut out).err(),
        kit.activation(Activation::Silu, &mut out, 9).err(),
        kit.cfg_combine(&small, 5, 2.0, &mut out).err(),
        kit.axpy(1.0, &small, &mut out, 9).err(),
        kit.mask_rows(&mut out, 3, 3, &small).err(),
        kit.concat_features(&[(&small, 3)], 3, &mut out).err(),
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
    let bad_groups = Conv1dSpec { batch: 1, n: 2, c_in: 3, c_out: 3, kernel: 1, pad: 0, groups: 2 };
    assert!(kit.conv1d(&bad_groups, &small, &small, None, &mut out).unwrap_err().to_string().contains("groups"));
}

macro_rules! backend_suite {
    ($name:ident, $make:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn kit() -> Option<impl Backend> {
                $make
            }
            backend_suite!(@tests gemm, attention, layer_norm, adaln_modulate, gated_add, grn, split_heads_rope,
                merge_heads, conv1d, activations, cfg_combine, axpy, mask_rows, concat_features, embedding,
                polar_spectrum, refuses_short_buffers);
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
