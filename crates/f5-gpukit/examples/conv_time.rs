//! Throughput of the CPU backend's dense 1-D convolution, f32 (`CpuBackend`) against bf16
//! filters (`CpuBf16Backend`: AVX-512 BF16, the AMX bf16 tiles where the CPU has them, or f32 on
//! the widened filters where the bf16 products are missing or do not pay) and int8
//! (`CpuBf16Backend::with_int8_convs`; the int8 column is left out on a CPU without AVX-512
//! VNNI; where the CPU has AMX tiles, "int8" is the VNNI kernel and "amx" the int8 mode as it runs
//! there: the int8 tiles from 256 input channels, the bf16 tiles below, or the int8 tiles on
//! every shape with `F5_CPU_INT8_ON_BF16_TILES=off`), on the
//! shapes Kokoro-82M's generator and decoder
//! spend their time in: channels-last input, 'same' padding, 128 channels at k3/k7/k11 with
//! dilations 1/3/5 over long inputs, 256 channels over shorter ones, 512/1024 channels at k3.
//!
//! ```sh
//! cargo run --release -p f5-gpukit --example conv_time -- --threads 2
//! ```
//!
//! Options: `--threads N` (default 2), `--min-seconds S` (time per shape and precision, default
//! 1; the best run is reported), `--rounds R` (default 2: the precisions are timed alternately R
//! times, so a change in machine load hits all), `--only SUBSTRING` (shapes whose name
//! contains it). Prints GFLOP/s (2·rows·c_out·K·c_in / best time) of each precision and the
//! rel-L2 difference of the bf16 and int8 outputs from the f32 one. Timings are printed, never
//! asserted. The f32 k7/k11 convolutions run by FFT, so their figure is an effective rate (the
//! direct sum's FLOPs over the FFT path's time); `F5_CPU_FFT_CONV=off` times the direct kernel.
//! Likewise the f32 k3 ones run by Winograd's F(4, 3) (`F5_CPU_WINOGRAD_CONV=off`: direct).

use std::time::Instant;

use f5_gpukit::{Backend, Conv1dSpec, ConvTranspose1dSpec, CpuBackend, CpuBf16Backend};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Uniform values in [−scale, scale), deterministic.
fn uniform(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let u = (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
            ((2.0 * u - 1.0) as f32) * scale
        })
        .collect()
}

/// Best wall time of `f` over at least `min_seconds` (and at least 2 runs).
fn best_of(min_seconds: f64, mut f: impl FnMut() -> AnyResult<()>) -> AnyResult<f64> {
    let started = Instant::now();
    let mut best = f64::INFINITY;
    let mut runs = 0;
    while runs < 2 || started.elapsed().as_secs_f64() < min_seconds {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    Ok(best)
}

/// Large buffers on cache lines, as the `f5` binary has them (the CPU kernels' vector loads
/// straddle two lines from the system allocator's 16-byte alignment).
#[global_allocator]
static ALLOCATOR: f5_gpukit::LineAligned = f5_gpukit::LineAligned;

fn main() -> AnyResult<()> {
    let (mut threads, mut min_seconds, mut rounds, mut only) = (2usize, 1.0f64, 2usize, String::new());
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--threads" => threads = value.parse()?,
            "--min-seconds" => min_seconds = value.parse()?,
            "--rounds" => rounds = value.parse()?,
            "--only" => only = value,
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    let f32_kit = CpuBackend::with_threads(threads)?;
    let bf16_kit = CpuBf16Backend::with_threads(threads)?;
    let (int8_kit, amx_kit) = match CpuBf16Backend::with_int8_convs(threads) {
        Ok(kit) if kit.amx_convs() => (Some(kit.clone().without_amx()), Some(kit)),
        Ok(kit) => {
            println!("amx not run: no AMX tiles on this CPU (or F5_CPU_AMX=off)");
            (Some(kit), None)
        }
        Err(e) => {
            println!("int8 not run: {e}");
            (None, None)
        }
    };
    println!("{threads} threads; GFLOP/s = 2·rows·c_out·K·c_in / best time; speed-ups against f32");
    println!(
        "{:<28} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11}",
        "conv (c, K, dilation, rows)", "f32", "bf16", "int8", "amx", "bf16 ×", "int8 ×", "amx ×", "rel-L2 bf16", "rel-L2 int8"
    );
    // (channels, kernel, dilation, rows): the generator's resblocks at the two upsampled rates,
    // the decoder's wide k3 convs; then those of a short sentence (56 phonemes, 153 frames),
    // which take the few-row path (AVX-512 or AVX2): the decoder's k3 convs (and on AVX2 the F0/N
    // blocks' 256-channel ones at 306 rows; AVX-512 runs those on the direct kernel), the
    // text encoder's k5 over the 58 tokens; and its generator's resblocks (3,060 and 18,360
    // frames).
    // Then the generator's noise convs, which read the source's 22-row spectrum (n_fft + 2):
    // 22 → 256 with k12 stride 6 at the first stage, 22 → 128 with k1 at the last (the long
    // input's 26,000 and 156,000 frames).
    let shapes: [(usize, usize, usize, usize, usize, usize); 22] = [
        (128, 128, 3, 1, 1, 40000),
        (128, 128, 3, 5, 1, 40000),
        (128, 128, 7, 1, 1, 40000),
        (128, 128, 7, 3, 1, 40000),
        (128, 128, 11, 1, 1, 40000),
        (128, 128, 11, 5, 1, 40000),
        (256, 256, 3, 1, 1, 6000),
        (256, 256, 7, 5, 1, 6000),
        (256, 256, 11, 3, 1, 6000),
        (512, 512, 3, 1, 1, 3000),
        (1024, 1024, 3, 1, 1, 1500),
        (1024, 1024, 3, 1, 1, 153),
        (512, 512, 3, 1, 1, 153),
        (256, 256, 3, 1, 1, 306),
        (512, 512, 5, 1, 1, 58),
        (256, 256, 7, 3, 1, 3060),
        (256, 256, 11, 5, 1, 3060),
        (128, 128, 3, 3, 1, 18360),
        (128, 128, 7, 5, 1, 18360),
        (128, 128, 11, 1, 1, 18360),
        (22, 256, 12, 1, 6, 156000),
        (22, 128, 1, 1, 1, 156000),
    ];
    for (c_in, c, kernel, dilation, stride, rows) in shapes {
        let channels = if c_in == c { format!("c{c}") } else { format!("c{c_in}→{c}") };
        let strided = if stride > 1 { format!(" s{stride}") } else { String::new() };
        let name = format!("{channels} k{kernel} d{dilation}{strided} × {rows}");
        if !name.contains(&only) {
            continue;
        }
        let pad = if stride > 1 { stride.div_ceil(2) } else { dilation * (kernel - 1) / 2 };
        let spec = Conv1dSpec::new(1, rows, c_in, c, kernel).dilation(dilation).stride(stride).pad(pad);
        let x = uniform(rows * c_in, 1, 1.0);
        let w = uniform(c * c_in * kernel, 2, 1.0 / ((c_in * kernel) as f32).sqrt());
        let b = uniform(c, 3, 0.1);
        let n_y = spec.n_out() * c;

        let (xa, wa, ba) = (f32_kit.upload(&x)?, f32_kit.upload_weight(&w)?, f32_kit.upload(&b)?);
        let mut ya = f32_kit.alloc(n_y)?;
        let (xb, wb, bb) = (bf16_kit.upload(&x)?, bf16_kit.upload_weight(&w)?, bf16_kit.upload(&b)?);
        let mut yb = bf16_kit.alloc(n_y)?;
        let mut int8 = match &int8_kit {
            Some(kit) => Some((kit, kit.upload(&x)?, kit.upload_weight_int8(&w)?, kit.upload(&b)?, kit.alloc(n_y)?)),
            None => None,
        };
        let mut amx = match &amx_kit {
            Some(kit) => Some((kit, kit.upload(&x)?, kit.upload_weight_int8(&w)?, kit.upload(&b)?, kit.alloc(n_y)?)),
            None => None,
        };
        let (mut t32, mut t16, mut t8, mut tx) = (f64::INFINITY, f64::INFINITY, f64::INFINITY, f64::INFINITY);
        for _ in 0..rounds {
            t32 = t32.min(best_of(min_seconds, || Ok(f32_kit.conv1d(&spec, &xa, &wa, Some(&ba), &mut ya)?))?);
            t16 = t16.min(best_of(min_seconds, || Ok(bf16_kit.conv1d(&spec, &xb, &wb, Some(&bb), &mut yb)?))?);
            if let Some((kit, xi, wi, bi, yi)) = &mut int8 {
                t8 = t8.min(best_of(min_seconds, || Ok(kit.conv1d(&spec, xi, wi, Some(bi), yi)?))?);
            }
            if let Some((kit, xi, wi, bi, yi)) = &mut amx {
                tx = tx.min(best_of(min_seconds, || Ok(kit.conv1d(&spec, xi, wi, Some(bi), yi)?))?);
            }
        }
        let y32 = f32_kit.download(&ya)?;
        let rel_l2 = |y: &[f32]| {
            let num: f64 = y32.iter().zip(y).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum();
            let den: f64 = y32.iter().map(|&a| (a as f64).powi(2)).sum();
            (num / den).sqrt()
        };
        let e16 = rel_l2(&bf16_kit.download(&yb)?);
        let e8 = match &int8 {
            Some((kit, _, _, _, yi)) => rel_l2(&kit.download(yi)?),
            None => f64::NAN,
        };
        // The int8 tiles compute the VNNI kernel's arithmetic exactly, and a shape given to the
        // bf16 tiles gives the bf16 backend's bits: any other output is a fault.
        if let (Some((kit8, _, _, _, y8)), Some((kitx, _, _, _, yx))) = (&int8, &amx) {
            let got = kitx.download(yx)?;
            if got != kit8.download(y8)? && got != bf16_kit.download(&yb)? {
                return Err(format!("{name}: the AMX output is neither the VNNI int8 one nor the bf16 one").into());
            }
        }
        let flops = 2.0 * (spec.n_out() * c * kernel * c_in) as f64;
        println!(
            "{:<28} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>7.2}× {:>7.2}× {:>7.2}× {:>11.2e} {:>11.2e}",
            name,
            flops / t32 / 1e9,
            flops / t16 / 1e9,
            flops / t8 / 1e9,
            flops / tx / 1e9,
            t32 / t16,
            t32 / t8,
            t32 / tx,
            e16,
            e8
        );
    }
    transposed(&f32_kit, &bf16_kit, &only, min_seconds, rounds)
}

/// The generator's two upsamplers (transposed convolutions, PyTorch's `[c_in, c_out, K]`
/// filters), at the short input's rates (306 → 3,060 → 18,360 rows) and the long one's (2,600 →
/// 26,000 → 156,000): f32 and bf16, GFLOP/s of `2·n_in·c_in·c_out·K` (every input row times
/// every tap).
fn transposed(f32_kit: &CpuBackend, bf16_kit: &CpuBf16Backend, only: &str, min_seconds: f64, rounds: usize) -> AnyResult<()> {
    // (c_in, c_out, kernel, stride, input rows)
    let shapes: [(usize, usize, usize, usize, usize); 4] =
        [(512, 256, 20, 10, 306), (256, 128, 12, 6, 3060), (512, 256, 20, 10, 2600), (256, 128, 12, 6, 26000)];
    for (c_in, c_out, kernel, stride, n) in shapes {
        let name = format!("up c{c_in}→{c_out} k{kernel} s{stride} × {n}");
        if !name.contains(only) {
            continue;
        }
        let spec = ConvTranspose1dSpec::new(1, n, c_in, c_out, kernel, stride).pad((kernel - stride) / 2);
        let x = uniform(n * c_in, 4, 1.0);
        let w = uniform(c_in * c_out * kernel, 5, 1.0 / ((c_in * kernel / stride) as f32).sqrt());
        let b = uniform(c_out, 6, 0.1);
        let n_y = spec.n_out() * c_out;
        let (xa, wa, ba) = (f32_kit.upload(&x)?, f32_kit.upload_weight(&w)?, f32_kit.upload(&b)?);
        let mut ya = f32_kit.alloc(n_y)?;
        let (xb, wb, bb) = (bf16_kit.upload(&x)?, bf16_kit.upload_weight(&w)?, bf16_kit.upload(&b)?);
        let mut yb = bf16_kit.alloc(n_y)?;
        let (mut t32, mut t16) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..rounds {
            t32 = t32.min(best_of(min_seconds, || Ok(f32_kit.conv_transpose1d(&spec, &xa, &wa, Some(&ba), &mut ya)?))?);
            t16 = t16.min(best_of(min_seconds, || Ok(bf16_kit.conv_transpose1d(&spec, &xb, &wb, Some(&bb), &mut yb)?))?);
        }
        let (y32, y16) = (f32_kit.download(&ya)?, bf16_kit.download(&yb)?);
        let num: f64 = y32.iter().zip(&y16).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum();
        let den: f64 = y32.iter().map(|&a| (a as f64).powi(2)).sum();
        let flops = 2.0 * (n * c_in * c_out * kernel) as f64;
        println!(
            "{:<28} {:>8.1} {:>8.1} {:>8} {:>8} {:>7.2}× {:>8} {:>8} {:>11.2e} {:>11}",
            name,
            flops / t32 / 1e9,
            flops / t16 / 1e9,
            "",
            "",
            t32 / t16,
            "",
            "",
            (num / den).sqrt(),
            ""
        );
    }
    Ok(())
}
