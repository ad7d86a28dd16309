//! The decoder (AdaIN residual blocks over the aligned text features, F0 and energy) and the
//! ISTFTNet generator (source excitation + transposed-conv upsampling + inverse STFT).

use f5_gpukit::{Activation, Backend, Conv1dSpec, ConvTranspose1dSpec, Pad1dSpec, PadMode, StftSpec};
use f5_nn::torch_rand::TorchGenerator;
use f5_nn::{Conv1d, ConvTranspose1d, Scope};

use crate::blocks::{buffer, AdaInResBlock1, AdainResBlk};
use crate::config::IstftNetSizes;
use crate::source::{SineSource, HARMONICS};
use crate::{KokoroError, SourceSpectrum, Trace};

type Result<T> = std::result::Result<T, KokoroError>;

/// Slopes of the generator's LeakyReLUs: 0.1 before each upsampling stage, PyTorch's default 0.01
/// before `conv_post`.
const STAGE_SLOPE: f32 = 0.1;
const POST_SLOPE: f32 = 0.01;

pub(crate) struct Decoder<B: Backend> {
    f0_conv: Conv1d<B>,
    n_conv: Conv1d<B>,
    encode: AdainResBlk<B>,
    asr_res: Conv1d<B>,
    decode: Vec<AdainResBlk<B>>,
    generator: Generator<B>,
}

impl<B: Backend> Decoder<B> {
    pub(crate) fn load(w: &mut Scope<'_>, kit: &B, asr_dim: usize, style_dim: usize, sizes: &IstftNetSizes) -> Result<Self> {
        let curve = || Conv1dSpec::new(1, 0, 1, 1, 3).stride(2).pad(1);
        let encode = AdainResBlk::load_gemm_weights(w, kit, "encode", style_dim)?;
        let res_out = w.shape("asr_res.0.weight_v").or_else(|| w.shape("asr_res.0.weight")).map_or(0, |s| s[0]);
        let asr_res = Conv1d::load(w, kit, "asr_res.0", Conv1dSpec::new(1, 0, asr_dim, res_out, 1), true)?;
        let mut decode = Vec::new();
        let mut i = 0;
        while w.contains(&format!("decode.{i}.conv1.weight_v")) || w.contains(&format!("decode.{i}.conv1.weight")) {
            decode.push(AdainResBlk::load_gemm_weights(w, kit, &format!("decode.{i}"), style_dim)?);
            i += 1;
        }
        let Some(last) = decode.last() else { return Err(w.missing("decode.0.conv1.weight").into()) };
        let gen_in = last.c_out;
        Ok(Decoder {
            f0_conv: Conv1d::load(w, kit, "F0_conv", curve(), true)?,
            n_conv: Conv1d::load(w, kit, "N_conv", curve(), true)?,
            encode,
            asr_res,
            generator: Generator::load(&mut w.scope("generator"), kit, gen_in, style_dim, sizes)?,
            decode,
        })
    }

    /// `asr [F, asr_dim]`, F0 and N curves `[2F]` and the acoustic style → audio.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        kit: &B,
        asr: &B::Buf,
        asr_dim: usize,
        f: usize,
        f0: &B::Buf,
        n_curve: &B::Buf,
        style: &B::Buf,
        rng: &mut TorchGenerator,
        spectrum: Option<&SourceSpectrum>,
        trace: &mut Trace<'_>,
    ) -> Result<Vec<f32>> {
        let mut f0d = buffer(kit, f, 1)?;
        let mut nd = buffer(kit, f, 1)?;
        let fd = self.f0_conv.apply(kit, f0, 1, 2 * f, &mut f0d)?;
        self.n_conv.apply(kit, n_curve, 1, 2 * f, &mut nd)?;
        if fd != f {
            return Err(KokoroError::Input(format!("F0 curve of {} values does not halve to {f} frames", 2 * f)));
        }
        trace.emit(kit, "dec_F0_conv", &f0d)?;
        trace.emit(kit, "dec_N_conv", &nd)?;
        let mut x = buffer(kit, f, asr_dim + 2)?;
        kit.concat_features(&[(asr, asr_dim), (&f0d, 1), (&nd, 1)], f, &mut x)?;
        let (mut x, mut n) = self.encode.apply(kit, &x, f, style)?;
        trace.emit(kit, "dec_encode", &x)?;
        let res_dim = self.asr_res.spec.c_out;
        let mut asr_res = buffer(kit, f, res_dim)?;
        self.asr_res.apply(kit, asr, 1, f, &mut asr_res)?;
        trace.emit(kit, "dec_asr_res", &asr_res)?;
        let mut with_res = true;
        let mut width = self.encode.c_out;
        for (i, block) in self.decode.iter().enumerate() {
            if with_res {
                let mut cat = buffer(kit, n, width + res_dim + 2)?;
                kit.concat_features(&[(&x, width), (&asr_res, res_dim), (&f0d, 1), (&nd, 1)], n, &mut cat)?;
                x = cat;
            }
            let (y, m) = block.apply(kit, &x, n, style)?;
            x = y;
            n = m;
            width = block.c_out;
            trace.emit(kit, &format!("dec_decode{i}"), &x)?;
            if block.upsamples() {
                with_res = false;
            }
        }
        let f0_host = kit.download(f0)?;
        self.generator.forward(kit, x, n, &f0_host[..2 * f], style, rng, spectrum, trace)
    }
}

struct Generator<B: Backend> {
    source: SineSource,
    noise_convs: Vec<Conv1d<B>>,
    noise_res: Vec<AdaInResBlock1<B>>,
    ups: Vec<ConvTranspose1d<B>>,
    resblocks: Vec<AdaInResBlock1<B>>,
    kernels: usize,
    /// `conv_post`: `[n, 128]` → `[n, n_fft + 2]`, log-magnitudes then phases.
    conv_post: Conv1d<B>,
    n_fft: usize,
    hop: usize,
}

impl<B: Backend> Generator<B> {
    fn load(w: &mut Scope<'_>, kit: &B, c_in: usize, style_dim: usize, s: &IstftNetSizes) -> Result<Self> {
        let c0 = s.upsample_initial_channel;
        if c0 != c_in {
            return Err(KokoroError::Config(format!("generator takes {c0} channels, the decoder gives {c_in}")));
        }
        let stages = s.upsample_rates.len();
        let spec_ch = s.gen_istft_n_fft + 2;
        let mut g = Generator {
            source: SineSource {
                weight: [0.0; HARMONICS],
                bias: 0.0,
                upsample: s.upsample_rates.iter().product::<usize>() * s.gen_istft_hop_size,
            },
            noise_convs: vec![],
            noise_res: vec![],
            ups: vec![],
            resblocks: vec![],
            kernels: s.resblock_kernel_sizes.len(),
            conv_post: Conv1d { weight: kit.alloc(0)?, bias: None, spec: Conv1dSpec::new(1, 0, 1, 1, 1) },
            n_fft: s.gen_istft_n_fft,
            hop: s.gen_istft_hop_size,
        };
        let lw = w.host("m_source.l_linear.weight", &[1, HARMONICS])?;
        g.source.weight.copy_from_slice(&lw);
        g.source.bias = w.host("m_source.l_linear.bias", &[1])?[0];
        let mut ch = c0;
        for i in 0..stages {
            let (u, k) = (s.upsample_rates[i], s.upsample_kernel_sizes[i]);
            let c_cur = c0 >> (i + 1);
            let up = ConvTranspose1dSpec::new(1, 0, ch, c_cur, k, u).pad((k - u) / 2);
            // The upsamplers are dense GEMMs over every output sample: GEMM weights (bf16 on the bf16
            // CPU backend), as the resblocks' convs. The noise convs stay f32: they read the source's
            // STFT (phase included), and in bf16 they added 1.1e-3 to the small model's 5.7e-3
            // audio rel-L2 (bf16 vs f32) for a few percent of the generator's arithmetic.
            g.ups.push(ConvTranspose1d::load_weight(w, kit, &format!("ups.{i}"), up, true)?);
            for (j, (&rk, dil)) in s.resblock_kernel_sizes.iter().zip(&s.resblock_dilation_sizes).enumerate() {
                g.resblocks.push(AdaInResBlock1::load(w, kit, &format!("resblocks.{}", i * g.kernels + j), c_cur, rk, dil, style_dim)?);
            }
            let (noise, res_k) = if i + 1 < stages {
                let stride = s.upsample_rates[i + 1..].iter().product::<usize>();
                (Conv1dSpec::new(1, 0, spec_ch, c_cur, 2 * stride).stride(stride).pad(stride.div_ceil(2)), 7)
            } else {
                (Conv1dSpec::new(1, 0, spec_ch, c_cur, 1), 11)
            };
            g.noise_convs.push(Conv1d::load(w, kit, &format!("noise_convs.{i}"), noise, true)?);
            g.noise_res.push(AdaInResBlock1::load(w, kit, &format!("noise_res.{i}"), c_cur, res_k, &[1, 3, 5], style_dim)?);
            ch = c_cur;
        }
        // conv_post computes in f32 (its log-magnitudes go through exp) as one convolution; its
        // rows are split into the log-magnitude and phase halves afterwards (`post`).
        g.conv_post = Conv1d::load(w, kit, "conv_post", Conv1dSpec::new(1, 0, ch, spec_ch, 7).pad(3), true)?;
        Ok(g)
    }

    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        kit: &B,
        mut x: B::Buf,
        mut n: usize,
        f0: &[f32],
        style: &B::Buf,
        rng: &mut TorchGenerator,
        spectrum: Option<&SourceSpectrum>,
        trace: &mut Trace<'_>,
    ) -> Result<Vec<f32>> {
        let (har, frames, bins) = match spectrum {
            Some(s) => self.given_spectrum(kit, s, f0.len())?,
            None => self.source_spectrum(kit, f0, rng, trace)?,
        };
        self.stages(kit, &mut x, &mut n, &har, frames, style, trace)?;
        self.post(kit, x, n, bins, trace)
    }

    /// The excitation's spectrum `[frames, 2·bins]` (magnitudes, then phases) as an outside
    /// implementation computed it.
    fn given_spectrum(&self, kit: &B, s: &SourceSpectrum, f0_len: usize) -> Result<(B::Buf, usize, usize)> {
        let bins = self.n_fft / 2 + 1;
        let frames = f0_len * self.source.upsample / self.hop + 1;
        if s.magnitude.len() != frames * bins || s.phase.len() != frames * bins {
            return Err(KokoroError::Input(format!("a source spectrum here is {frames} frames × {bins} bins")));
        }
        let (mag, phase) = (kit.upload(&s.magnitude)?, kit.upload(&s.phase)?);
        let mut har = buffer(kit, frames, 2 * bins)?;
        kit.concat_features(&[(&mag, bins), (&phase, bins)], frames, &mut har)?;
        Ok((har, frames, bins))
    }

    fn source_spectrum(&self, kit: &B, f0: &[f32], rng: &mut TorchGenerator, trace: &mut Trace<'_>) -> Result<(B::Buf, usize, usize)> {
        // Source excitation and its spectrum.
        let mut source_trace = None;
        let want_trace = trace.wants();
        let har_source = kit.on_host_threads(|| self.source.generate(f0, rng, want_trace.then_some(&mut source_trace)))?;
        if let Some(st) = source_trace {
            trace.emit_host("gen_sine_waves", st.sine_waves);
            trace.emit_host("gen_source_noise", st.noise);
            trace.emit_host("gen_sine_uv", st.uv);
        }
        trace.emit_host("gen_har_source", har_source.clone());
        let stft = StftSpec::for_samples(1, har_source.len(), self.n_fft, self.hop);
        let bins = stft.bins();
        let frames = stft.frames;
        let signal = kit.upload(&har_source)?;
        let (mut mag, mut phase) = (buffer(kit, frames, bins)?, buffer(kit, frames, bins)?);
        kit.stft(&stft, &signal, &mut mag, &mut phase)?;
        trace.emit(kit, "gen_har_mag", &mag)?;
        trace.emit(kit, "gen_har_phase", &phase)?;
        let mut har = buffer(kit, frames, 2 * bins)?;
        kit.concat_features(&[(&mag, bins), (&phase, bins)], frames, &mut har)?;
        Ok((har, frames, bins))
    }

    /// The upsampling stages with their source branches, in place on `x`/`n`.
    #[allow(clippy::too_many_arguments)]
    fn stages(
        &self,
        kit: &B,
        x: &mut B::Buf,
        n: &mut usize,
        har: &B::Buf,
        frames: usize,
        style: &B::Buf,
        trace: &mut Trace<'_>,
    ) -> Result<()> {
        let stages = self.ups.len();
        let mut c = self.ups.first().map_or(0, |u| u.spec.c_in);
        for i in 0..stages {
            kit.activation(Activation::LeakyRelu(STAGE_SLOPE), x, *n * c)?;
            trace.emit(kit, &format!("gen_stage{i}_in"), x)?;
            // Buffers at this stage's rate are the forward's largest (128 channels at 4,800
            // frames/s in the last stage): each is dropped as soon as it is spent, and the
            // residual blocks share two scratch buffers, so at most five are alive at once. The
            // upsampling runs first, while only its input and output are alive: its GEMM's
            // column chunks and packed filters then come on top of two buffers, not five.
            let ups = &self.ups[i];
            let nu = ups.n_out(*n);
            let c_cur = ups.spec.c_out;
            let mut y = buffer(kit, nu, c_cur)?;
            ups.apply(kit, x, 1, *n, &mut y)?;
            // The previous stage's output is spent.
            *x = kit.alloc(0)?;
            trace.emit(kit, &format!("gen_ups{i}"), &y)?;
            let (mut y, nu) = if i + 1 == stages {
                // ReflectionPad1d((1, 0)): one mirrored frame in front.
                let spec = Pad1dSpec { batch: 1, n: nu, c: c_cur, left: 1, right: 0, mode: PadMode::Reflect };
                let mut p = buffer(kit, nu + 1, c_cur)?;
                kit.pad1d(&spec, &y, &mut p)?;
                drop(y);
                (p, nu + 1)
            } else {
                (y, nu)
            };
            let conv = &self.noise_convs[i];
            let ns = conv.n_out(frames);
            if nu != ns || conv.spec.c_out != c_cur {
                return Err(KokoroError::Input(format!(
                    "stage {i}: {nu} upsampled frames × {c_cur} channels vs {ns} source frames × {}",
                    conv.spec.c_out
                )));
            }
            let (mut t, mut u) = (buffer(kit, ns, c_cur)?, buffer(kit, ns, c_cur)?);
            let mut xs = buffer(kit, ns, c_cur)?;
            conv.apply(kit, har, 1, frames, &mut xs)?;
            trace.emit(kit, &format!("gen_noise_conv{i}"), &xs)?;
            self.noise_res[i].apply_in_place(kit, &mut xs, ns, style, &mut t, &mut u)?;
            trace.emit(kit, &format!("gen_noise_res{i}"), &xs)?;
            kit.axpy(1.0, &xs, &mut y, nu * c_cur)?;
            drop(xs);
            // The mean of the blocks' outputs, each block run on its own copy of `y` (the
            // last on `y` itself); the sum is formed in the reference's order: r₀ + r₁ + r₂.
            let mut sum = buffer(kit, nu, c_cur)?;
            let mut r = if self.kernels > 2 { Some(buffer(kit, nu, c_cur)?) } else { None };
            for j in 0..self.kernels {
                let block = &self.resblocks[i * self.kernels + j];
                let last = j + 1 == self.kernels;
                let out = if j == 0 && !last {
                    kit.copy(&y, 0, &mut sum, 0, nu * c_cur)?;
                    &mut sum
                } else if last {
                    &mut y
                } else {
                    let r = r.as_mut().ok_or_else(|| KokoroError::Input("residual block scratch missing".into()))?;
                    kit.copy(&y, 0, r, 0, nu * c_cur)?;
                    r
                };
                block.apply_in_place(kit, out, nu, style, &mut t, &mut u)?;
                trace.emit(kit, &format!("gen_resblock{}", i * self.kernels + j), out)?;
                if j > 0 {
                    let out: &B::Buf =
                        if last { &y } else { r.as_ref().ok_or_else(|| KokoroError::Input("residual block scratch missing".into()))? };
                    kit.axpy(1.0, out, &mut sum, nu * c_cur)?;
                }
            }
            drop((t, u, r));
            if self.kernels == 1 {
                // One block: its output is the mean.
                std::mem::swap(&mut sum, &mut y);
            }
            kit.activation(Activation::Scale(1.0 / self.kernels as f32), &mut sum, nu * c_cur)?;
            *x = sum;
            *n = nu;
            c = c_cur;
        }
        Ok(())
    }

    /// LeakyReLU 0.01, `conv_post`, `exp` / `sin`, inverse STFT.
    ///
    /// `conv_post` runs as one convolution and its rows are then split into the log-magnitude
    /// and phase halves: as two convolutions of 11 outputs each (what the halves are for
    /// Kokoro) they cost twice what one of 22 does on the CPU (22 ms each against 22.5 ms over
    /// the long input's 156,000 rows, 2 threads), since a convolution tile's panel is 32
    /// channels wide either way.
    /// `bins` is the STFT's (`n_fft / 2 + 1`); `n_fft` is even (the config checks it), so the
    /// convolution's `n_fft + 2` channels halve into `bins` each.
    fn post(&self, kit: &B, mut x: B::Buf, n: usize, bins: usize, trace: &mut Trace<'_>) -> Result<Vec<f32>> {
        let (c, width) = (self.conv_post.spec.c_in, self.conv_post.spec.c_out);
        kit.activation(Activation::LeakyRelu(POST_SLOPE), &mut x, n * c)?;
        trace.emit(kit, "gen_conv_post_in", &x)?;
        let mut out = buffer(kit, n, width)?;
        self.conv_post.apply(kit, &x, 1, n, &mut out)?;
        drop(x);
        let (mut logmag, mut ph) = (buffer(kit, n, bins)?, buffer(kit, n, width - bins)?);
        kit.split_features(&out, n, &mut [(&mut logmag, bins), (&mut ph, width - bins)])?;
        drop(out);
        kit.activation(Activation::Exp, &mut logmag, n * bins)?;
        kit.activation(Activation::Sin, &mut ph, n * bins)?;
        trace.emit(kit, "gen_istft_mag", &logmag)?;
        trace.emit(kit, "gen_istft_phase", &ph)?;
        let spec = StftSpec { batch: 1, frames: n, n_fft: self.n_fft, hop: self.hop };
        let mut audio = buffer(kit, spec.samples(), 1)?;
        kit.istft(&spec, &logmag, &ph, &mut audio)?;
        Ok(kit.download(&audio)?)
    }
}
