//! PyTorch's CPU random numbers, drawn exactly as `torch.manual_seed(seed)` followed by
//! `torch.rand`/`torch.randn` draws them on an x86-64 CPU, so that a seed means the same
//! utterance here as in the reference implementations (F5's starting noise, Kokoro's source
//! noise).
//!
//! PyTorch's CPU generator is MT19937 seeded with the low 32 bits of the seed. `randn` of at
//! least 16 float32 values first fills the whole tensor with 24-bit uniforms, then runs
//! Box–Muller over blocks of 16 (lanes j and j+8 pair up); a length that is not a multiple of 16
//! re-draws 16 fresh uniforms into the last 16 slots and transforms them again. The transform is
//! the AVX2 kernel's: Cephes-style `log` and `sincos` polynomials in f32 with fused multiply-adds
//! at exactly the places the compiled kernel has them — that is what makes it bit-exact.

use f5_gpukit::{CpuBackend, KitError};

const N: usize = 624;
const M: usize = 397;

/// PyTorch's `mt19937` CPU generator.
#[derive(Clone)]
pub struct TorchGenerator {
    state: [u32; N],
    next: usize,
    left: usize,
    /// `normal_distribution<double>` caches its second value across calls (used for < 16 values).
    cached_normal: Option<f64>,
}

impl TorchGenerator {
    /// `torch.manual_seed(seed)`: only the low 32 bits reach the state.
    pub fn new(seed: u64) -> Self {
        let mut state = [0u32; N];
        state[0] = seed as u32;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        TorchGenerator { state, next: 0, left: 1, cached_normal: None }
    }

    /// The next 624 words of state. In three runs rather than one loop with `% N`: two integer
    /// divisions per word were most of the cost of a draw, and the runs vectorise.
    fn twist(&mut self) {
        #[inline(always)]
        fn mix(cur: u32, next: u32, far: u32) -> u32 {
            const UPPER: u32 = 0x8000_0000;
            const LOWER: u32 = 0x7fff_ffff;
            let y = (cur & UPPER) | (next & LOWER);
            far ^ (y >> 1) ^ if next & 1 != 0 { 0x9908_b0df } else { 0 }
        }
        let s = &mut self.state;
        // i + M < N: reads words not yet replaced.
        for i in 0..N - M {
            s[i] = mix(s[i], s[i + 1], s[i + M]);
        }
        // i + M ≥ N: reads the words replaced N − M steps earlier.
        for i in N - M..N - 1 {
            s[i] = mix(s[i], s[i + 1], s[i + M - N]);
        }
        s[N - 1] = mix(s[N - 1], s[0], s[M - 1]);
    }

    /// Fills `out` with the next draws, as that many [`TorchGenerator::next_u32`] calls would:
    /// the words left of the current state, then whole twisted states tempered in bulk.
    pub fn fill_u32(&mut self, out: &mut [u32]) {
        let mut done = 0;
        while done < out.len() {
            // `next_u32` hands out state[next..] while `left` > 1 and twists when it reaches 0.
            let avail = self.left - 1;
            if avail == 0 {
                self.twist();
                self.left = N + 1;
                self.next = 0;
                continue;
            }
            let take = avail.min(out.len() - done);
            for (o, &y) in out[done..done + take].iter_mut().zip(&self.state[self.next..self.next + take]) {
                *o = temper(y);
            }
            self.next += take;
            self.left -= take;
            done += take;
        }
    }

    /// The next raw 32-bit draw of the Mersenne Twister, as torch's CPU generator gives it.
    pub fn next_u32(&mut self) -> u32 {
        self.left -= 1;
        if self.left == 0 {
            self.twist();
            self.left = N;
            self.next = 0;
        }
        let y = self.state[self.next];
        self.next += 1;
        temper(y)
    }

    /// Uniform in [0, 1) from the low 24 bits of one draw (exact in f32).
    fn uniform_f32(&mut self) -> f32 {
        (self.next_u32() & 0x00ff_ffff) as f32 * (1.0 / 16_777_216.0)
    }

    /// `torch.randn(len)` (float32, contiguous) continuing this generator's stream.
    pub fn randn(&mut self, len: usize) -> Vec<f32> {
        let mut d = vec![0.0f32; len];
        if len >= 16 {
            for v in d.iter_mut() {
                *v = self.uniform_f32();
            }
            let mut i = 0;
            while i + 16 <= len {
                box_muller16(&mut d[i..i + 16]);
                i += 16;
            }
            if !len.is_multiple_of(16) {
                let tail = len - 16;
                for v in d[tail..].iter_mut() {
                    *v = self.uniform_f32();
                }
                box_muller16(&mut d[tail..]);
            }
        } else {
            for v in d.iter_mut() {
                *v = self.normal_f64() as f32;
            }
        }
        d
    }

    /// `normal_()` on a tensor that is not contiguous (or has fewer than 16 values): PyTorch then
    /// takes its serial path, one double-precision Box–Muller normal per value (the second of each
    /// pair cached in the generator), rounded to f32, in the tensor's memory order. Kokoro's source
    /// noise is such a draw (`randn_like` of a transposed tensor).
    ///
    /// The generator's words are drawn in order, in bulk ([`TorchGenerator::fill_u32`]); the
    /// pairs' logarithms, square roots and sines — nearly all the cost — run vectorised on the
    /// current rayon pool ([`CpuBackend::box_muller_normals`]: f64 within an ulp of libm's, so
    /// each value is the serial loop's except, about once in 10⁸ values, one f32 ulp away).
    pub fn randn_serial(&mut self, len: usize) -> Result<Vec<f32>, KitError> {
        let mut out = vec![0.0f32; len];
        self.randn_serial_into(&mut out)?;
        Ok(out)
    }

    /// [`TorchGenerator::randn_serial`] into `out`: the next `out.len()` values of the serial
    /// normal stream. The stream does not depend on how it is cut: calls of 5 and 7 values give
    /// the 12 values one call gives (an odd count leaves the last pair's second value cached, as
    /// PyTorch's generator does), so a long draw can be taken a block at a time, each block's
    /// words and values in cache, with no buffer for the whole draw.
    pub fn randn_serial_into(&mut self, out: &mut [f32]) -> Result<(), KitError> {
        if out.is_empty() {
            return Ok(());
        }
        let mut start = 0;
        if let Some(v) = self.cached_normal.take() {
            out[0] = v as f32;
            start = 1;
        }
        let rest = out.len() - start;
        let whole = rest / 2 * 2;
        let mut words = vec![0u32; 2 * whole];
        self.fill_u32(&mut words);
        CpuBackend::new().box_muller_normals(&words, &mut out[start..start + whole])?;
        if whole < rest {
            // An odd count: the last value is the first of a fresh pair, whose second value stays
            // cached, in double precision.
            let w = std::array::from_fn(|_| self.next_u32());
            let (c, s) = box_muller_f64(&w);
            out[start + whole] = c as f32;
            self.cached_normal = Some(s);
        }
        Ok(())
    }

    fn normal_f64(&mut self) -> f64 {
        if let Some(v) = self.cached_normal.take() {
            return v;
        }
        let words = std::array::from_fn(|_| self.next_u32());
        let (c, s) = box_muller_f64(&words);
        self.cached_normal = Some(s);
        c
    }
}

/// MT19937's tempering of one state word into a draw.
#[inline(always)]
fn temper(mut y: u32) -> u32 {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c_5680;
    y ^= (y << 15) & 0xefc6_0000;
    y ^ (y >> 18)
}

/// `uniform_real_distribution<double>` on two 32-bit words: 53 bits of `(a << 32) | b`.
fn uniform_f64_of(a: u32, b: u32) -> f64 {
    ((((a as u64) << 32) | b as u64) & ((1u64 << 53) - 1)) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// `normal_distribution<double>`'s Box–Muller pair `(r·cos θ, r·sin θ)` from the four words
/// that its two uniforms (u1 for θ, then u2 for r) are drawn from.
fn box_muller_f64(w: &[u32; 4]) -> (f64, f64) {
    let u1 = uniform_f64_of(w[0], w[1]);
    let u2 = uniform_f64_of(w[2], w[3]);
    let r = (-2.0 * (-u2).ln_1p()).sqrt();
    let theta = 2.0 * std::f64::consts::PI * u1;
    (r * theta.cos(), r * theta.sin())
}

/// `torch.manual_seed(seed); torch.randn(frames, channels)` flattened row-major.
pub fn torch_randn(seed: u64, frames: usize, channels: usize) -> Vec<f32> {
    TorchGenerator::new(seed).randn(frames * channels)
}

#[inline]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// `log256_ps` of PyTorch's `avx_mathfun.h`, with the compiled kernel's contractions.
fn log_avx(x: f32) -> f32 {
    let x = x.max(f32::MIN_POSITIVE);
    let bits = x.to_bits();
    let mut e = ((bits >> 23) as i32 - 127) as f32 + 1.0;
    let m = f32::from_bits((bits & !0x7f80_0000) | 0x3f00_0000);
    let m = if m < f32::from_bits(0x3f35_04f3) {
        e -= 1.0;
        (m - 1.0) + m
    } else {
        m - 1.0
    };
    let z = m * m;
    let mut y = f32::from_bits(0x3d90_21bb);
    for c in [0xbdeb_d1b8u32, 0x3def_251a, 0xbdfe_5d4f, 0x3e11_e9bf, 0xbe2a_ae50, 0x3e4c_ceac, 0xbe7f_fffc, 0x3eaa_aaaa] {
        y = fma(y, m, f32::from_bits(c));
    }
    y *= m;
    y = fma(y, z, e * f32::from_bits(0xb95e_8083));
    y -= z * 0.5;
    (m + y) + e * f32::from_bits(0x3f31_8000)
}

/// `sincos256_ps` for x ≥ 0, returning (sin, cos).
fn sincos_avx(x: f32) -> (f32, f32) {
    let y = x * f32::from_bits(0x3fa2_f983);
    let j = ((y as i32) + 1) & !1;
    let yj = j as f32;
    let mut x = fma(yj, f32::from_bits(0xbf49_0000), x);
    x = fma(yj, f32::from_bits(0xb97d_a000), x);
    x = fma(yj, f32::from_bits(0xb322_2169), x);
    let z = x * x;
    let mut yc = fma(f32::from_bits(0x37cc_f5ce), z, f32::from_bits(0xbab6_061a));
    yc = fma(yc, z, f32::from_bits(0x3d2a_aaa5));
    yc *= z;
    yc = fma(yc, z, -(z * 0.5));
    yc += 1.0;
    let mut ys = fma(f32::from_bits(0xb94c_a1f9), z, f32::from_bits(0x3c08_839e));
    ys = fma(ys, z, f32::from_bits(0xbe2a_aaa3));
    ys *= z;
    ys = fma(ys, x, x);
    let (mut s, mut c) = if j & 2 == 0 { (ys, yc) } else { (yc, ys) };
    if j & 4 != 0 {
        s = -s;
    }
    if (j - 2) & 4 == 0 {
        c = -c;
    }
    (s, c)
}

fn box_muller16(d: &mut [f32]) {
    for j in 0..8 {
        let u1 = 1.0 - d[j];
        let u2 = d[j + 8];
        let radius = (-2.0 * log_avx(u1)).sqrt();
        let theta = f32::from_bits(0x40c9_0fdb) * u2;
        let (s, c) = sincos_avx(theta);
        d[j] = radius * c;
        d[j + 8] = radius * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_standard_stream() {
        // std::mt19937 seeded with its default 5489 yields 3499211612 first (C++ standard).
        let mut g = TorchGenerator::new(5489);
        assert_eq!(g.next_u32(), 3_499_211_612);
        // …and the 10000th value of a default-constructed mt19937 is 4123659995 (C++11 §26.5.5).
        for _ in 1..9999 {
            g.next_u32();
        }
        assert_eq!(g.next_u32(), 4_123_659_995);
    }

    #[test]
    fn bulk_words_are_the_one_at_a_time_stream() {
        // Starting fresh, mid-state and one word before a twist; runs shorter than, equal to
        // and longer than a state, so every path through `fill_u32` meets a twist.
        for (skip, run) in [(0usize, 5usize), (0, N), (3, 2 * N + 7), (N - 1, 1), (N - 1, N + 1), (N, 3 * N), (1000, 10)] {
            let (mut bulk, mut one) = (TorchGenerator::new(42), TorchGenerator::new(42));
            for _ in 0..skip {
                bulk.next_u32();
                one.next_u32();
            }
            let mut got = vec![0u32; run];
            bulk.fill_u32(&mut got);
            let want: Vec<u32> = (0..run).map(|_| one.next_u32()).collect();
            assert_eq!(got, want, "skip {skip}, run {run}");
            assert_eq!(bulk.next_u32(), one.next_u32(), "skip {skip}, run {run}: the streams moved apart");
        }
    }

    #[test]
    fn a_long_serial_draw_is_the_libm_loop() {
        // Kokoro's source noise at the length of a 4 s utterance: every value as the scalar
        // libm loop gives it (the vectorised f64 pairs round to the same f32).
        let (mut fast, mut slow) = (TorchGenerator::new(0), TorchGenerator::new(0));
        let len = 9 * 96_001;
        let got = fast.randn_serial(len).expect("a draw");
        let want: Vec<f32> = (0..len).map(|_| slow.normal_f64() as f32).collect();
        let differ = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{differ} of {len} values differ from the libm loop");
        assert_eq!(fast.next_u32(), slow.next_u32(), "the streams moved apart");
    }

    #[test]
    fn only_low_32_bits_of_the_seed_count() {
        assert_eq!(torch_randn(7, 3, 100), torch_randn((1u64 << 32) + 7, 3, 100));
    }

    #[test]
    fn serial_draws_in_parallel_equal_the_one_at_a_time_loop() {
        // Even and odd counts, starting with and without a cached second value, and the cache
        // left by an odd count carried into the next draw — on one thread and on three.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a pool");
        for lens in [[4usize, 6, 2], [5, 3, 8], [1, 1, 7]] {
            let (mut fast, mut slow) = (TorchGenerator::new(11), TorchGenerator::new(11));
            for (i, &len) in lens.iter().enumerate() {
                let got = if i % 2 == 0 { pool.install(|| fast.randn_serial(len)) } else { fast.randn_serial(len) }.expect("a draw");
                let want: Vec<f32> = (0..len).map(|_| slow.normal_f64() as f32).collect();
                assert_eq!(got, want, "draw {i} of {lens:?}");
            }
            assert_eq!(fast.next_u32(), slow.next_u32(), "the streams moved apart");
        }
    }

    #[test]
    fn a_draw_taken_in_blocks_is_the_one_draw() {
        // Kokoro's source takes its noise a block at a time: blocks of odd and even sizes, cut
        // anywhere, give the one draw's values bit for bit and leave the generator where it does.
        let len = 9 * 20_001;
        let mut one = TorchGenerator::new(5);
        let want = one.randn_serial(len).expect("a draw");
        for sizes in [[4096usize, 65_536], [1, 4097], [6_143, 2]] {
            let mut blocks = TorchGenerator::new(5);
            let mut got = vec![f32::NAN; len];
            let (mut at, mut i) = (0, 0);
            while at < len {
                let n = sizes[i % 2].min(len - at);
                blocks.randn_serial_into(&mut got[at..at + n]).expect("a block");
                (at, i) = (at + n, i + 1);
            }
            let differ = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(differ, 0, "blocks of {sizes:?}: {differ} values differ");
            assert_eq!(blocks.clone().next_u32(), one.clone().next_u32(), "blocks of {sizes:?}: the streams moved apart");
        }
    }

    #[test]
    fn normals_look_normal() {
        let v = torch_randn(1, 1000, 100);
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.02, "mean {mean} var {var}");
    }
}
