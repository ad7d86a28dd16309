//! The harmonic-plus-noise source (SineGen + SourceModuleHnNSF): F0 → 9 sines → one excitation
//! signal at the audio rate.
//!
//! It runs on the host in f32 with its phase summed in f64, whatever the model's backend or
//! precision, on the backend's CPU threads (`Backend::on_host_threads`; the noise's generator
//! words are drawn in order, everything elementwise in parallel): the phase reaches ~10⁵ radians over a few seconds, where one f32 ulp is already a
//! hundredth of a radian, and a half-precision source drops voices an octave. The arithmetic
//! follows the reference op for op (floor-mod, the 1/300 linear downsample that reads only two
//! samples per frame, the double-accumulated cumsum, the ×300 upsample) so the same seed gives
//! the same signal as PyTorch.

use f5_gpukit::InterpolateSpec;
use f5_nn::torch_rand::TorchGenerator;
use rayon::prelude::*;

use crate::KokoroError;

/// SineGen's constants (Kokoro's `SourceModuleHnNSF(sampling_rate=24000, harmonic_num=8,
/// voiced_threshod=10)`, `sine_amp` 0.1, `add_noise_std` 0.003).
pub const HARMONICS: usize = 9;
const SAMPLE_RATE: f32 = 24_000.0;
const SINE_AMP: f32 = 0.1;
const NOISE_STD: f32 = 0.003;
const VOICED_THRESHOLD: f32 = 10.0;
/// Samples per parallel task of the elementwise passes (a fixed split: each sample's value is
/// computed alone, so the result is the same on any number of threads).
const ROWS_PER_TASK: usize = 4096;

/// The source's intermediate signals, for tests and inspection.
pub struct SourceTrace {
    /// `[L, 9]` sines after the voicing mask and noise.
    pub sine_waves: Vec<f32>,
    /// `[L]` voiced (1) / unvoiced (0).
    pub uv: Vec<f32>,
    /// `[L, 9]` the noise added.
    pub noise: Vec<f32>,
}

/// `v.floor()` without libm's `floorf` (a call per value: SSE2 has no rounding instruction), so
/// the loop over it vectorises: below 2²³ in magnitude, adding and subtracting 2²³ (with `v`'s
/// sign) rounds to the nearest integer, one less where that passed `v`; from 2²³ up every f32
/// is an integer already, and ±∞ and NaN pass through. The zero keeps `v`'s sign, as
/// floor(−0) = −0.
#[inline(always)]
fn floor(v: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    let m = TWO_23.copysign(v);
    let nearest = (v + m) - m;
    let below = nearest - if nearest > v { 1.0 } else { 0.0 };
    let fl = if v.abs() < TWO_23 { below } else { v };
    if fl == 0.0 {
        fl.copysign(v)
    } else {
        fl
    }
}

/// `l_linear` (9 → 1) of the source module.
pub struct SineSource {
    /// One weight per harmonic of the sine source.
    pub weight: [f32; HARMONICS],
    /// Bias of the merge.
    pub bias: f32,
    /// Samples per F0 value (the generator's upsampling × the iSTFT hop: 300).
    pub upsample: usize,
}

impl SineSource {
    /// `har_source [L]` (`L = f0.len()·upsample`) for an F0 curve, drawing the noise from `rng`
    /// exactly as the reference does after `torch.manual_seed`: 9 uniforms for `rand_ini`, then
    /// `randn(1, L, 9)`.
    ///
    /// Formed a block at a time, with no `[L, 9]` buffer (each would be 28 MB for a 32 s
    /// utterance, and their first-touch page faults and memory passes were half the source's
    /// time): the per-frame phase increments from just the two samples the 1/`upsample`
    /// downsample reads of each frame, then, as the noise stream comes in `NOISE_BLOCK` draws
    /// at a time (harmonic 0's whole track first), each harmonic's upsampled phase, sine and
    /// noise added into the merge, sample by sample in the reference's order. The values are
    /// the op-by-op form's bit for bit (tested).
    pub fn generate(&self, f0: &[f32], rng: &mut TorchGenerator, trace: Option<&mut Option<SourceTrace>>) -> Result<Vec<f32>, KokoroError> {
        let up = self.upsample;
        let len = f0.len().checked_mul(up).ok_or_else(|| KokoroError::Input("F0 curve too long".into()))?;
        if len == 0 {
            return Ok(Vec::new());
        }
        // rand_ini: random initial phases for the overtones at time 0 only (the downsample
        // below never reads time 0, but the draw advances the generator).
        let mut ini = [0.0f32; HARMONICS];
        for (k, r) in ini.iter_mut().enumerate() {
            let u = (rng.next_u32() & 0x00FF_FFFF) as f32 * (1.0 / 16_777_216.0);
            if k > 0 {
                *r = u;
            }
        }
        // rad = (fn / sr) mod 1 at sample t, fn = f0 (nearest ×up) · (1..9), floor-mod as
        // torch's `%`, with rand_ini added at time 0.
        let rad = |t: usize, k: usize| {
            let v = (f0[t / up] * (k + 1) as f32) / SAMPLE_RATE;
            let r = v - floor(v);
            if t == 0 && k > 0 {
                r + ini[k]
            } else {
                r
            }
        };
        // Per-frame phase increments (the 1/up linear downsample, each output the op's
        // fma of its two taps), their cumulative sum in f64 (the cumsum op's), scaled to radians.
        let down = InterpolateSpec::by_scale(1, len, HARMONICS, 1.0 / up as f64);
        let mut phase = vec![0.0f32; down.n_out * HARMONICS];
        let mut sum = [0.0f64; HARMONICS];
        for (i, row) in phase.chunks_exact_mut(HARMONICS).enumerate() {
            let (i0, i1, l0, l1) = down.taps(i);
            for (k, (p, acc)) in row.iter_mut().zip(sum.iter_mut()).enumerate() {
                *acc += rad(i0, k).mul_add(l0, rad(i1, k) * l1) as f64;
                *p = two_pi_scaled(*acc as f32, up);
            }
        }
        let upspec = InterpolateSpec::by_scale(1, down.n_out, HARMONICS, up as f64);
        if upspec.n_out != len {
            return Err(KokoroError::Input(format!("source length {} ≠ {len}: the F0 curve does not divide into frames", upspec.n_out)));
        }
        // Sines, voicing, noise. `randn_like` of the sines keeps their strides, and the sines are a
        // transposed `[1, 9, L]` tensor: PyTorch fills it with its serial normal path in memory
        // order — harmonic 0's whole track first, so noise[t, k] is draw[k·L + t].
        let tracks = Tracks { f0, up, len, phase: &phase, upspec, weight: &self.weight, bias: self.bias };
        let total = len * HARMONICS;
        let mut har = vec![0.0f32; len];
        let mut drawn = trace.is_some().then(|| Vec::with_capacity(total));
        let mut block = vec![0.0f32; NOISE_BLOCK.min(total)];
        let mut at = 0;
        while at < total {
            let block = &mut block[..NOISE_BLOCK.min(total - at)];
            rng.randn_serial_into(block)?;
            // The block as runs of one harmonic's track.
            let mut off = 0;
            while off < block.len() {
                let (k, t0) = ((at + off) / len, (at + off) % len);
                let run = (len - t0).min(block.len() - off);
                tracks.merge(k, t0, &block[off..off + run], &mut har[t0..t0 + run])?;
                off += run;
            }
            if let Some(d) = drawn.as_mut() {
                d.extend_from_slice(block);
            }
            at += block.len();
        }
        if let (Some(slot), Some(drawn)) = (trace, drawn) {
            *slot = Some(tracks.trace(&drawn)?);
        }
        Ok(har)
    }
}

/// Normals of the source noise drawn at a time (even, so no Box–Muller pair is split; their
/// generator words and values, 768 KiB, stay in cache).
const NOISE_BLOCK: usize = 1 << 16;

/// The cumulative phase in radians: `cumsum · 2π · up`, in the reference's f32 order.
fn two_pi_scaled(cycles: f32, up: usize) -> f32 {
    (cycles * 2.0) * std::f32::consts::PI * up as f32
}

/// What the per-sample merge reads: the frame-rate phases and how they upsample, the voicing,
/// the merge's weights.
struct Tracks<'a> {
    f0: &'a [f32],
    up: usize,
    len: usize,
    /// `[frames, 9]` cumulative phase in radians.
    phase: &'a [f32],
    upspec: InterpolateSpec,
    weight: &'a [f32; HARMONICS],
    bias: f32,
}

impl Tracks<'_> {
    /// Voiced (1) or not (0) at sample `t`, and the noise's amplitude there.
    fn amplitude(&self, t: usize) -> (f32, f32) {
        let voiced = if self.f0[t / self.up] > VOICED_THRESHOLD { 1.0f32 } else { 0.0 };
        (voiced, voiced * NOISE_STD + (1.0 - voiced) * SINE_AMP / 3.0)
    }

    /// Harmonic `k`'s phase at samples `t0..t0 + out.len()` (the ×up linear upsample, the
    /// op's values), then their sines.
    fn sines(&self, k: usize, t0: usize, out: &mut [f32]) -> Result<(), KokoroError> {
        f5_gpukit::host::interpolate_channel(&self.upspec, self.phase, k, t0, out)?;
        f5_gpukit::host::sin(out);
        Ok(())
    }

    /// Harmonic `k`'s samples `t0..` added into the merge `acc` (`acc += w_k · s`, the
    /// reference's order over k), with `noise` the track's draws there; after the last
    /// harmonic, `acc` becomes `tanh(acc + bias)`.
    fn merge(&self, k: usize, t0: usize, noise: &[f32], acc: &mut [f32]) -> Result<(), KokoroError> {
        acc.par_chunks_mut(ROWS_PER_TASK).zip(noise.par_chunks(ROWS_PER_TASK)).enumerate().try_for_each(|(blk, (acc, noise))| {
            let first = t0 + blk * ROWS_PER_TASK;
            let mut sines = [0.0f32; ROWS_PER_TASK];
            let sines = &mut sines[..acc.len()];
            self.sines(k, first, sines)?;
            // A run of samples at a time within one F0 frame: one voicing for the run.
            let mut i = 0;
            while i < acc.len() {
                let t = first + i;
                let run = (self.up - t % self.up).min(acc.len() - i);
                let (voiced, amp) = self.amplitude(t);
                let w = self.weight[k];
                for ((a, &n), &sn) in acc[i..i + run].iter_mut().zip(&noise[i..i + run]).zip(&sines[i..i + run]) {
                    *a += w * excitation(sn, voiced, amp, n);
                }
                i += run;
            }
            if k + 1 == HARMONICS {
                acc.iter_mut().for_each(|a| *a = (*a + self.bias).tanh());
            }
            Ok(())
        })
    }

    /// The `[L, 9]` signals and the voicing, for a trace, from the whole draw (`k·L + t`).
    fn trace(&self, drawn: &[f32]) -> Result<SourceTrace, KokoroError> {
        let len = self.len;
        let (mut sine_waves, mut noise) = (vec![0.0f32; len * HARMONICS], vec![0.0f32; len * HARMONICS]);
        let uv: Vec<f32> = (0..len).map(|t| self.amplitude(t).0).collect();
        let mut sines = vec![0.0f32; len];
        for k in 0..HARMONICS {
            self.sines(k, 0, &mut sines)?;
            for (t, &sn) in sines.iter().enumerate() {
                let (voiced, amp) = self.amplitude(t);
                let n = drawn[k * len + t];
                sine_waves[t * HARMONICS + k] = excitation(sn, voiced, amp, n);
                noise[t * HARMONICS + k] = amp * n;
            }
        }
        Ok(SourceTrace { sine_waves, uv, noise })
    }
}

/// One harmonic's excitation at one sample: the sine at `SINE_AMP` where voiced, plus the
/// noise at `amp` (in the reference's order of operations).
#[inline(always)]
fn excitation(sine: f32, voiced: f32, amp: f32, noise: f32) -> f32 {
    let n = amp * noise;
    (sine * SINE_AMP) * voiced + n
}

#[cfg(test)]
mod tests {
    use super::*;

    use f5_gpukit::{Activation, Backend, CpuBackend};

    impl SineSource {
        /// The op-by-op form that the blocked [`SineSource::generate`] replaced: whole `[L, 9]`
        /// buffers through the kit's ops, as the reference runs them.
        fn generate_op_by_op(
            &self,
            f0: &[f32],
            rng: &mut TorchGenerator,
            trace: Option<&mut Option<SourceTrace>>,
        ) -> Result<Vec<f32>, KokoroError> {
            let up = self.upsample;
            let len = f0.len().checked_mul(up).ok_or_else(|| KokoroError::Input("F0 curve too long".into()))?;
            if len == 0 {
                return Ok(Vec::new());
            }
            let cpu = CpuBackend::new();
            // fn = f0 (nearest ×up) · (1..9); rad = (fn / sr) mod 1, floor-mod as torch's `%`.
            let mut rad = vec![0.0f32; len * HARMONICS];
            rad.par_chunks_mut(HARMONICS * ROWS_PER_TASK).enumerate().for_each(|(blk, rows)| {
                for (i, row) in rows.chunks_mut(HARMONICS).enumerate() {
                    let f = f0[(blk * ROWS_PER_TASK + i) / up];
                    for (k, r) in row.iter_mut().enumerate() {
                        let v = (f * (k + 1) as f32) / SAMPLE_RATE;
                        *r = v - floor(v);
                    }
                }
            });
            // rand_ini: random initial phases for the overtones at time 0 only (the downsample
            // below never reads time 0, but the draw advances the generator).
            for (k, r) in rad[..HARMONICS].iter_mut().enumerate() {
                let u = (rng.next_u32() & 0x00FF_FFFF) as f32 * (1.0 / 16_777_216.0);
                if k > 0 {
                    *r += u;
                }
            }
            // Per-frame phase increments (1/up linear downsample), cumulative phase in f64.
            let down = InterpolateSpec::by_scale(1, len, HARMONICS, 1.0 / up as f64);
            let mut r = vec![0.0f32; down.n_out * HARMONICS];
            cpu.interpolate_linear(&down, &rad, &mut r)?;
            drop(rad);
            let mut phase = vec![0.0f32; r.len()];
            cpu.cumsum(&r, 1, down.n_out, HARMONICS, &mut phase)?;
            let two_pi_scaled = |c: f32| (c * 2.0) * std::f32::consts::PI * up as f32;
            phase.iter_mut().for_each(|p| *p = two_pi_scaled(*p));
            let upspec = InterpolateSpec::by_scale(1, down.n_out, HARMONICS, up as f64);
            let mut phase_up = vec![0.0f32; upspec.n_out * HARMONICS];
            cpu.interpolate_linear(&upspec, &phase, &mut phase_up)?;
            if upspec.n_out != len {
                return Err(KokoroError::Input(format!(
                    "source length {} ≠ {len}: the F0 curve does not divide into frames",
                    upspec.n_out
                )));
            }
            // Sines, voicing, noise. `randn_like` of the sines keeps their strides, and the sines are a
            // transposed `[1, 9, L]` tensor: PyTorch fills it with its serial normal path in memory
            // order — harmonic 0's whole track first, so noise[t, k] is draw[k·L + t].
            let noise_draw = rng.randn_serial(len * HARMONICS)?;
            let amplitude = |t: usize| {
                let voiced = if f0[t / up] > VOICED_THRESHOLD { 1.0f32 } else { 0.0 };
                (voiced, voiced * NOISE_STD + (1.0 - voiced) * SINE_AMP / 3.0)
            };
            let mut uv = vec![0.0f32; len];
            // The sines are written over their phases (`phase_up` is spent once read); the scaled
            // noise is kept only for a trace, which forms it again below: the forward itself needs
            // just the merged `har`, so it holds no `[L, 9]` noise buffer.
            let mut sines = phase_up;
            // The sines of all the phases first, vectorised (libm's value or one ulp from it).
            cpu.activation(Activation::Sin, &mut sines, len * HARMONICS)?;
            let mut har = vec![0.0f32; len];
            har.par_chunks_mut(ROWS_PER_TASK)
                .zip(uv.par_chunks_mut(ROWS_PER_TASK))
                .zip(sines.par_chunks_mut(HARMONICS * ROWS_PER_TASK))
                .enumerate()
                .for_each(|(blk, ((har, uv), sines))| {
                    for (i, ((h, u), srow)) in har.iter_mut().zip(uv.iter_mut()).zip(sines.chunks_mut(HARMONICS)).enumerate() {
                        let t = blk * ROWS_PER_TASK + i;
                        let (voiced, amp) = amplitude(t);
                        *u = voiced;
                        let mut acc = 0.0f32;
                        for k in 0..HARMONICS {
                            let n = amp * noise_draw[k * len + t];
                            let s = srow[k] * SINE_AMP;
                            let s = s * voiced + n;
                            srow[k] = s;
                            acc += self.weight[k] * s;
                        }
                        *h = (acc + self.bias).tanh();
                    }
                });
            if let Some(slot) = trace {
                let mut noise = vec![0.0f32; len * HARMONICS];
                noise.par_chunks_mut(HARMONICS * ROWS_PER_TASK).enumerate().for_each(|(blk, rows)| {
                    for (i, row) in rows.chunks_mut(HARMONICS).enumerate() {
                        let t = blk * ROWS_PER_TASK + i;
                        let amp = amplitude(t).1;
                        for (k, n) in row.iter_mut().enumerate() {
                            *n = amp * noise_draw[k * len + t];
                        }
                    }
                });
                *slot = Some(SourceTrace { sine_waves: sines, uv, noise });
            }
            Ok(har)
        }
    }

    /// The blocked source against the op-by-op form: the signal, the trace and the generator
    /// left behind, bit for bit. Voiced, unvoiced, sub-threshold and negative F0; one frame to
    /// several noise blocks; an odd upsampling, whose tracks start inside a Box–Muller pair.
    #[test]
    fn blocked_source_is_the_op_by_op_form_bit_for_bit() {
        for (frames, up, seed) in [(1usize, 300usize, 3u64), (7, 300, 4), (250, 300, 5), (13, 7, 6), (4001, 7, 7)] {
            let source = SineSource { weight: [0.1, -0.2, 0.15, 0.05, -0.1, 0.08, 0.02, -0.03, 0.01], bias: 0.01, upsample: up };
            let f0: Vec<f32> = (0..frames).map(|i| [0.0, -35.0, 5.0, 10.0, 90.0 + (i * 37 % 200) as f32 * 1.7, 210.5][i % 6]).collect();
            let (mut fast, mut plain) = (TorchGenerator::new(seed), TorchGenerator::new(seed));
            let (mut traced, mut want_trace) = (None, None);
            let got = source.generate(&f0, &mut fast, Some(&mut traced)).expect("blocked");
            let want = source.generate_op_by_op(&f0, &mut plain, Some(&mut want_trace)).expect("op by op");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{frames} frames ×{up}: har differs");
            let (t, w) = (traced.expect("a trace"), want_trace.expect("a trace"));
            assert_eq!(bits(&t.sine_waves), bits(&w.sine_waves), "{frames} frames ×{up}: sines differ");
            assert_eq!(bits(&t.noise), bits(&w.noise), "{frames} frames ×{up}: noise differs");
            assert_eq!(bits(&t.uv), bits(&w.uv), "{frames} frames ×{up}: voicing differs");
            assert_eq!(fast.next_u32(), plain.next_u32(), "{frames} frames ×{up}: the generators moved apart");
            // Without a trace, the same signal.
            let untraced = source.generate(&f0, &mut TorchGenerator::new(seed), None).expect("blocked");
            assert_eq!(bits(&untraced), bits(&want), "{frames} frames ×{up}: har differs untraced");
        }
    }

    #[test]
    fn floor_is_libms_bit_for_bit() {
        let mut args = vec![0.0f32, -0.0, 0.3, -0.3, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 1e-30, -1e-30, f32::MIN_POSITIVE];
        args.extend([4_194_303.5f32, 4_194_304.5, 4_194_305.0, -4_194_305.0, 8_388_607.5, -8_388_607.5, 8_388_608.0, 16_777_217.0]);
        args.extend([f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY]);
        // F0·k/24000 for F0 over a voice's range and past it, both signs.
        args.extend((0..200_000).map(|i| (i as f32 * 0.0371 - 2000.0) * 7.0 / 24_000.0));
        args.extend((0..2_000).map(|i| f32::from_bits(0x4a80_0000 + i * 977)));
        for v in args {
            assert_eq!(floor(v).to_bits(), v.floor().to_bits(), "floor({v:e}) = {:e}, libm {:e}", floor(v), v.floor());
        }
        assert!(floor(f32::NAN).is_nan());
        // The wrong variant: rounding to nearest alone is not the floor.
        let nearest = |v: f32| (v + 8_388_608.0) - 8_388_608.0;
        assert_ne!(nearest(0.7), 0.7f32.floor());
    }
}
