//! The int8 dense convolution against a scalar reference of its exact arithmetic (where the CPU
//! has AVX-512 VNNI: bit for bit, since its sums are exact integers) and the reference against an
//! f64 convolution with a bound derived from the quantisation steps (on every machine).
//!
//! The bound, per output, over the terms that are not zero padding (those are exact zeros on
//! both sides): with `x̂ = q_x·s_x` (`s_x` the step of the input row the term reads), `ŵ = q_w·s_w`, `|x̂ − x| ≤ s_x/2` and `|ŵ − w| ≤ 2⁻⁹|w| + s_w/2`
//! (the bf16 rounding of the stored weight, then the int8 step), so
//! `|x̂ŵ − xw| ≤ (s_x/2)·(|w|(1 + 2⁻⁹) + s_w/2) + |x|·(2⁻⁹|w| + s_w/2)`, plus a few f32 roundings
//! of the scales, the per-tap f32 sums and the epilogue (`(K + 16)·2⁻²⁴` of the magnitudes) — and `1e-6` relative
//! of the step for the product `x·(127/max)` being rounded before it is rounded to an integer.
//!
//! Wrong variants (the +128 offset not taken out, taps read one step off, padding taps reading
//! the edge row instead of zero) run through the same checks and must fail them.

use super::{conv1d_dense, reference, scales, supports, Avx512Vnni, PackedFilters, MAX_TERMS};
use crate::cpu::bf16::conv::tests::{conv_f64, data, shapes};
use crate::cpu::bf16::gemm::{from_bf16, to_bf16};
use crate::cpu::bf16::{CpuBf16Backend, CpuBuf, Repr};
use crate::spec::{Conv1dSpec, PadMode};
use crate::{Backend, CpuBackend};

fn kernel_available(test: &str) -> Option<Avx512Vnni> {
    match Avx512Vnni::detect() {
        Ok(cpu) => {
            let tiles = if cpu.amx() { "and the AMX tiles" } else { "(no AMX tiles here)" };
            println!("{test}: AVX-512 VNNI kernel {tiles} ran");
            Some(cpu)
        }
        Err(missing) => {
            println!("{test}: AVX-512 VNNI kernel not run (this CPU lacks {missing}); reference only");
            None
        }
    }
}

/// Every kernel this CPU runs: the VNNI one, and the AMX one where the tiles are there.
fn kernels(cpu: Avx512Vnni) -> Vec<Avx512Vnni> {
    if cpu.amx() {
        vec![cpu, cpu.without_amx()]
    } else {
        vec![cpu]
    }
}

/// Shapes whose input channels fill whole AMX tiles (multiples of 64): padding at both ends,
/// partial row tiles and panels, a stride (rows not consecutive), reflection, a batch, fewer
/// rows than one tile. For the VNNI kernel they also cover whole and partial panel pairs, a
/// single panel left over, and taps summed in one group or several.
fn tile_shapes() -> Vec<Conv1dSpec> {
    let s = |batch, n, c_in, c_out, kernel, stride, dilation, pad| {
        Conv1dSpec::new(batch, n, c_in, c_out, kernel).stride(stride).dilation(dilation).pad(pad)
    };
    vec![
        s(2, 137, 64, 40, 7, 1, 3, 9),
        s(1, 300, 128, 96, 3, 1, 5, 5),
        s(1, 61, 192, 33, 3, 2, 1, 1),
        s(1, 90, 64, 17, 5, 1, 1, 2).pad_mode(PadMode::Reflect),
        s(1, 20, 256, 8, 11, 1, 1, 5),
        s(1, 700, 512, 64, 1, 1, 1, 0),
        // Two whole panel pairs, 11 taps in three groups of the VNNI kernel (4, 4, 3), a
        // partial last row tile.
        s(1, 251, 128, 128, 11, 1, 5, 25),
    ]
}

fn bf16_bits(w: &[f32]) -> Vec<u16> {
    w.iter().map(|&v| to_bf16(v)).collect()
}

/// The kernel on a private pool of `threads` (so the row blocking varies).
fn run_kernel(cpu: Avx512Vnni, spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, threads: usize) -> Vec<f32> {
    let wb = bf16_bits(w);
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("test pool");
    pool.install(|| conv1d_dense(cpu, spec, x, &PackedFilters::pack(spec, &wb), bias, &mut y));
    y
}

fn run_reference(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let mut y = vec![f32::NAN; spec.batch * spec.n_out() * spec.c_out];
    reference(spec, x, &bf16_bits(w), bias, &mut y);
    y
}

/// Filters whose output channels differ in range (×1/4 … ×2), so that a per-channel weight
/// scale is exercised rather than one that happens to equal the tensor's.
fn spread_filters(spec: &Conv1dSpec, w: &mut [f32]) {
    let per = spec.c_in * spec.kernel;
    for (co, filter) in w.chunks_mut(per.max(1)).enumerate() {
        let gain = [0.25f32, 2.0, 0.5, 1.0][co % 4];
        filter.iter_mut().for_each(|v| *v *= gain);
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Wrong {
    /// The sums keep the +128 of every unsigned activation byte.
    NoOffsetCorrection,
    /// Each tap reads one input row further on.
    TapOffByOne,
    /// Taps on zero padding read the nearest edge row.
    PaddingReplicated,
}

/// The exact reference with one mistake put in, for the checks to catch.
fn wrong_reference(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, wrong: Wrong) -> Vec<f32> {
    match wrong {
        Wrong::NoOffsetCorrection => {
            // Each tap that reads an input row keeps 128·Σ_c q_w[co, c, k] of that row's step.
            let mut y = run_reference(spec, x, w, bias);
            let Conv1dSpec { n, c_in, c_out, kernel, .. } = *spec;
            let per = c_in * kernel;
            let n_out = spec.n_out();
            for co in 0..c_out {
                let filter: Vec<f32> = w[co * per..(co + 1) * per].iter().map(|&v| from_bf16(to_bf16(v))).collect();
                let (inv, w_step) = scales(filter.iter().fold(0.0f32, |m, &v| m.max(v.abs())));
                let tap_sum = |k: usize| (0..c_in).map(|c| super::quantize(filter[c * kernel + k], inv)).sum::<i32>();
                for b in 0..spec.batch {
                    let xb = &x[b * n * c_in..(b + 1) * n * c_in];
                    for t in 0..n_out {
                        let mut extra = 0.0f32;
                        for k in 0..kernel {
                            let Some(s) = spec.pad_mode.source(t * spec.stride + k * spec.dilation, spec.pad, n) else { continue };
                            let row = &xb[s * c_in..(s + 1) * c_in];
                            let (_, x_step) = scales(row.iter().fold(0.0f32, |m, &v| m.max(v.abs())));
                            extra += (128 * tap_sum(k)) as f32 * x_step;
                        }
                        y[(b * n_out + t) * c_out + co] += extra * w_step;
                    }
                }
            }
            y
        }
        Wrong::TapOffByOne => {
            // Shifting the input one row earlier makes every tap read one row further on.
            let mut shifted = x.to_vec();
            for b in 0..spec.batch {
                let item = &mut shifted[b * spec.n * spec.c_in..(b + 1) * spec.n * spec.c_in];
                item.copy_within(spec.c_in.., 0);
            }
            run_reference(spec, &shifted, w, bias)
        }
        Wrong::PaddingReplicated => run_reference(&spec.pad_mode(PadMode::Replicate), x, w, bias),
    }
}

/// Per output, the quantisation bound of the module docs.
fn bound(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f64> {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, stride, dilation, pad, .. } = *spec;
    let per = c_in * kernel;
    let n_out = spec.n_out();
    let eps_w = 2f64.powi(-9);
    let w_step: Vec<f64> = (0..c_out)
        .map(|co| {
            let m = w[co * per..(co + 1) * per].iter().fold(0.0f32, |m, &v| m.max(from_bf16(to_bf16(v)).abs()));
            m as f64 / 127.0
        })
        .collect();
    let mut out = vec![0.0f64; batch * n_out * c_out];
    for b in 0..batch {
        let xb = &x[b * n * c_in..(b + 1) * n * c_in];
        let x_step: Vec<f64> = xb.chunks(c_in.max(1)).map(|row| row.iter().fold(0.0f32, |m, &v| m.max(v.abs())) as f64 / 127.0).collect();
        for t in 0..n_out {
            for co in 0..c_out {
                let sw = w_step[co];
                let (mut err, mut mag) = (0.0f64, bias[co].abs() as f64);
                for k in 0..kernel {
                    let Some(s) = spec.pad_mode.source(t * stride + k * dilation, pad, n) else { continue };
                    for ci in 0..c_in {
                        let (xv, wv) = (xb[s * c_in + ci].abs() as f64, w[(co * c_in + ci) * kernel + k].abs() as f64);
                        let (dx, dw) = (x_step[s] / 2.0 + 1e-6 * x_step[s], eps_w * wv + sw / 2.0 + 1e-6 * sw);
                        err += dx * (wv + dw) + xv * dw;
                        mag += xv * wv;
                    }
                }
                out[(b * n_out + t) * c_out + co] = err + (kernel + 16) as f64 * 2f64.powi(-24) * (mag + err) + 1e-30;
            }
        }
    }
    out
}

fn violations(got: &[f32], want: &[f64], bound: &[f64]) -> usize {
    // An output never written (NaN, as the tests fill `y`) counts too.
    got.iter().zip(want).zip(bound).filter(|((&g, &w), &b)| g.is_nan() || (g as f64 - w).abs() > b).count()
}

/// The scalar quantisation (filters at upload, the reference) rounds as `round_ties_even` and
/// clamps to ±127, NaN to −127: on every tie up to the clamp, on values just either side of
/// them, past the clamp and on the non-finite values. A plain `round` (ties away from zero)
/// fails the ties at ±0.5, ±2.5, …
#[test]
fn scalar_quantisation_rounds_half_to_even_and_clamps() {
    let want = |y: f32| if y.is_nan() { -127 } else { y.round_ties_even().clamp(-127.0, 127.0) as i32 };
    let mut values = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN, 1e30, -1e30, 0.0, -0.0];
    for half in -300..=300 {
        let tie = half as f32 * 0.5;
        values.extend([tie, tie.next_up(), tie.next_down()]);
    }
    for &y in &values {
        assert_eq!(super::quantize(y, 1.0), want(y), "quantize({y:e})");
    }
    let ties_away = |y: f32| y.round().clamp(-127.0, 127.0) as i32;
    assert!(values.iter().filter(|y| y.is_finite()).any(|&y| ties_away(y) != want(y)), "the ties are not exercised");
}

#[test]
fn kernel_matches_the_exact_reference_bit_for_bit_on_any_thread_count() {
    let Some(cpu) = kernel_available("int8 conv1d vs exact reference") else { return };
    for (i, spec) in shapes().into_iter().chain(tile_shapes()).enumerate() {
        let (x, mut w, bias) = data(&spec, 0x1a8 + i as u64);
        spread_filters(&spec, &mut w);
        for bias in [Some(&bias[..]), None] {
            let want = run_reference(&spec, &x, &w, bias);
            for (kernel, threads) in kernels(cpu).into_iter().flat_map(|k| [(k, 1), (k, 3)]) {
                let got = run_kernel(kernel, &spec, &x, &w, bias, threads);
                let off = got.iter().zip(&want).filter(|(g, w)| g.to_bits() != w.to_bits()).count();
                let tiles = kernel.amx() && super::amx::fits(&spec);
                assert_eq!(
                    off,
                    0,
                    "{spec:?} AMX {tiles} threads {threads} bias {}: {off} outputs differ from the reference",
                    bias.is_some()
                );
            }
        }
    }
}

#[test]
fn int8_conv_is_within_the_quantisation_bound_of_the_f64_conv_and_wrong_variants_are_not() {
    let cpu = kernel_available("int8 conv1d vs f64");
    for (i, spec) in shapes().into_iter().enumerate() {
        let (x, mut w, bias) = data(&spec, 0x8f64 + i as u64);
        spread_filters(&spec, &mut w);
        let want = conv_f64(&spec, &x, &w, Some(&bias));
        let limit = bound(&spec, &x, &w, &bias);
        let got = match cpu {
            Some(cpu) => run_kernel(cpu, &spec, &x, &w, Some(&bias), 2),
            None => run_reference(&spec, &x, &w, Some(&bias)),
        };
        let bad = violations(&got, &want, &limit);
        assert_eq!(bad, 0, "{spec:?}: {bad} outputs outside the int8 bound of the f64 conv");
        let mut wrongs = vec![Wrong::NoOffsetCorrection, Wrong::TapOffByOne];
        if spec.pad > 0 && spec.pad_mode == PadMode::Zeros {
            wrongs.push(Wrong::PaddingReplicated);
        }
        for wrong in wrongs {
            let y = wrong_reference(&spec, &x, &w, Some(&bias), wrong);
            assert!(violations(&y, &want, &limit) > 0, "{spec:?}: the {wrong:?} variant passed the f64 check");
        }
    }
}

#[test]
fn sums_that_could_overflow_i32_are_not_taken() {
    let fits = Conv1dSpec::new(1, 10, MAX_TERMS / 8, 4, 8);
    assert!(supports(&fits));
    let too_long = Conv1dSpec::new(1, 10, MAX_TERMS / 8 + 4, 4, 8);
    assert!(!supports(&too_long));
    assert!(!supports(&Conv1dSpec::new(1, 10, 8, 8, 3).groups(2)), "grouped convolutions are not dense");
    assert!(!supports(&Conv1dSpec::new(1, 10, 0, 8, 3)), "no input channels: nothing to quantise");
}

#[test]
fn backend_in_int8_mode_runs_dense_bf16_filters_on_the_int8_kernel_and_the_rest_as_before() {
    let Some(cpu) = kernel_available("int8 backend conv1d") else { return };
    let int8 = CpuBf16Backend::with_int8_convs(2).expect("int8 backend");
    let bf16 = CpuBf16Backend::with_threads(2).expect("bf16 backend");
    let f32k = CpuBackend::with_threads(2).expect("f32 backend");
    // Dense with filters uploaded for int8: exactly the int8 kernel.
    let spec = Conv1dSpec::new(1, 64, 12, 20, 7).dilation(3).pad(9);
    let (x, w, bias) = data(&spec, 11);
    let (xb, wb, bb) = (int8.upload(&x).unwrap(), int8.upload_weight_int8(&w).unwrap(), int8.upload(&bias).unwrap());
    let mut yb = int8.alloc(spec.n_out() * spec.c_out).unwrap();
    int8.conv1d(&spec, &xb, &wb, Some(&bb), &mut yb).unwrap();
    assert_eq!(int8.download(&yb).unwrap(), run_kernel(cpu, &spec, &x, &w, Some(&bias), 2));
    // Filters uploaded as plain weights stay on the bf16 kernel in the int8 mode, and filters
    // uploaded for int8 on the bf16 backend (no int8 mode) are plain bf16 weights there.
    let mut y_plain = int8.alloc(spec.n_out() * spec.c_out).unwrap();
    int8.conv1d(&spec, &xb, &int8.upload_weight(&w).unwrap(), Some(&bb), &mut y_plain).unwrap();
    let mut y_bf16 = bf16.alloc(spec.n_out() * spec.c_out).unwrap();
    let (x16, b16) = (bf16.upload(&x).unwrap(), bf16.upload(&bias).unwrap());
    bf16.conv1d(&spec, &x16, &bf16.upload_weight_int8(&w).unwrap(), Some(&b16), &mut y_bf16).unwrap();
    let mut y_ref16 = bf16.alloc(spec.n_out() * spec.c_out).unwrap();
    bf16.conv1d(&spec, &x16, &bf16.upload_weight(&w).unwrap(), Some(&b16), &mut y_ref16).unwrap();
    assert_eq!(int8.download(&y_plain).unwrap(), bf16.download(&y_ref16).unwrap());
    assert_eq!(bf16.download(&y_bf16).unwrap(), bf16.download(&y_ref16).unwrap());
    // The int8 result is not the bf16 one (the mode is really on) but close to it.
    let mut y16 = bf16.alloc(spec.n_out() * spec.c_out).unwrap();
    let w16 = bf16.upload_weight(&w).unwrap();
    bf16.conv1d(&spec, &bf16.upload(&x).unwrap(), &w16, Some(&bf16.upload(&bias).unwrap()), &mut y16).unwrap();
    let (a, b) = (int8.download(&yb).unwrap(), bf16.download(&y16).unwrap());
    let diff = a.iter().zip(&b).map(|(p, q)| ((p - q) as f64).powi(2)).sum::<f64>().sqrt();
    let norm = b.iter().map(|q| (*q as f64).powi(2)).sum::<f64>().sqrt();
    assert!(diff > 0.0 && diff / norm < 2e-2, "int8 vs bf16 rel-L2 {}", diff / norm);
    // The bank kept with the weight follows a write to it (a stale bank would give the old
    // filters' result), and a second call with the bank kept gives the same bits.
    let mut wb = wb;
    let w2: Vec<f32> = w.iter().map(|v| -0.5 * v).collect();
    int8.write(&mut wb, 0, &w2).unwrap();
    for _ in 0..2 {
        int8.conv1d(&spec, &xb, &wb, Some(&bb), &mut yb).unwrap();
        assert_eq!(int8.download(&yb).unwrap(), run_kernel(cpu, &spec, &x, &w2, Some(&bias), 2));
    }
    int8.fill(&mut wb, 0, w.len(), 0.0).unwrap();
    int8.conv1d(&spec, &xb, &wb, Some(&bb), &mut yb).unwrap();
    let rows = int8.download(&yb).unwrap();
    assert!(rows.chunks(spec.c_out).all(|r| r == &bias[..]), "zeroed filters must leave the bias");
    // f32 filters stay f32, whatever the mode.
    let wf = int8.upload(&w).unwrap();
    int8.conv1d(&spec, &xb, &wf, Some(&bb), &mut yb).unwrap();
    let mut yf = vec![0.0; spec.n_out() * spec.c_out];
    f32k.conv1d(&spec, &x, &w, Some(&bias), &mut yf).unwrap();
    assert_eq!(int8.download(&yb).unwrap(), yf);
    // Grouped bf16 filters: the f32 conv of the rounded filters, as on the bf16 backend.
    let spec = Conv1dSpec::new(1, 30, 8, 8, 3).groups(4).pad(1);
    let (x, w, bias) = data(&spec, 12);
    let rounded: Vec<f32> = w.iter().map(|&v| from_bf16(to_bf16(v))).collect();
    let (xb, wb, bb) = (int8.upload(&x).unwrap(), int8.upload_weight_int8(&w).unwrap(), int8.upload(&bias).unwrap());
    let mut yb = int8.alloc(spec.n_out() * spec.c_out).unwrap();
    int8.conv1d(&spec, &xb, &wb, Some(&bb), &mut yb).unwrap();
    let mut yf = vec![0.0; spec.n_out() * spec.c_out];
    f32k.conv1d(&spec, &x, &rounded, Some(&bias), &mut yf).unwrap();
    assert_eq!(int8.download(&yb).unwrap(), yf);
}

#[test]
fn int8_mode_gives_narrow_convolutions_to_the_bf16_tiles_where_both_tiles_run() {
    let Some(cpu) = kernel_available("int8 mode's kernel choice") else { return };
    let int8 = CpuBf16Backend::with_int8_convs(2).expect("int8 backend");
    let bf16 = CpuBf16Backend::with_threads(2).expect("bf16 backend");
    let both_tiles = cpu.amx() && int8.amx_bf16.is_some();
    for c_in in [128, 256] {
        let spec = Conv1dSpec::new(1, 80, c_in, 32, 3).dilation(3).pad(3);
        let (x, w, bias) = data(&spec, 31);
        let run = |kit: &CpuBf16Backend, held_int8: bool| {
            let (xb, bb) = (kit.upload(&x).unwrap(), kit.upload(&bias).unwrap());
            let mut y = kit.alloc(spec.n_out() * spec.c_out).unwrap();
            // The bank as a bf16 weight marked for int8, and as one packed at upload (in int8
            // only where the int8 kernel will take it): the same bits either way.
            let marked = kit.upload_weight_int8(&w).unwrap();
            let packed = kit.upload_conv_filters_int8(&w, &spec).unwrap();
            assert_eq!(matches!(packed.0, Repr::Int8(_)), held_int8, "c_in {c_in}: held in int8");
            let mut outs = [&marked, &packed].map(|wb| {
                kit.conv1d(&spec, &xb, wb, Some(&bb), &mut y).unwrap();
                kit.download(&y).unwrap()
            });
            assert_eq!(outs[0], outs[1], "c_in {c_in}: marked and packed banks");
            std::mem::take(&mut outs[0])
        };
        let int8_kernel = run_kernel(cpu, &spec, &x, &w, Some(&bias), 2);
        let bf16_tiles = run(&bf16, false);
        assert_ne!(int8_kernel, bf16_tiles, "c_in {c_in}: the two kernels must differ for the check to tell them apart");
        // Below 256 channels the bf16 tiles, from 256 on the int8 ones; with no tiles (or only
        // one kind), the int8 kernel everywhere.
        let narrow = both_tiles && c_in < 256;
        assert_eq!(run(&int8, !narrow), if narrow { bf16_tiles } else { int8_kernel.clone() }, "c_in {c_in}");
        // The threshold at 0 keeps the int8 tiles, as the tests of their fused forms need.
        assert_eq!(run(&int8.clone().with_int8_tiles_from_channels(0), true), int8_kernel, "c_in {c_in}, threshold 0");
    }
}

#[test]
fn filters_held_only_in_int8_compute_as_the_kept_bank_read_back_dequantised_and_refuse_writes() {
    let Some(_) = kernel_available("int8-only filter bank") else { return };
    let int8 = CpuBf16Backend::with_int8_convs(2).expect("int8 backend");
    let spec = Conv1dSpec::new(1, 64, 12, 20, 7).dilation(3).pad(9);
    let (x, mut w, bias) = data(&spec, 21);
    spread_filters(&spec, &mut w);
    let mut held = int8.upload_conv_filters_int8(&w, &spec).unwrap();
    let kept = int8.upload_weight_int8(&w).unwrap();
    assert!(!held.is_bf16() && kept.is_bf16(), "the bank is held in int8 only; the other keeps bf16");
    let (xb, bb) = (int8.upload(&x).unwrap(), int8.upload(&bias).unwrap());
    let run = |wt: &CpuBuf, spec: &Conv1dSpec| {
        let mut y = int8.alloc(spec.n_out() * spec.c_out).unwrap();
        int8.conv1d(spec, &xb, wt, Some(&bb), &mut y).map(|()| int8.download(&y).unwrap())
    };
    let (a, b) = (run(&held, &spec).unwrap(), run(&kept, &spec).unwrap());
    assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "same bank, same bits");
    // Read back: exactly q_w · s_w of each filter's own quantisation (not the f32 or bf16 values).
    let per = spec.c_in * spec.kernel;
    let want: Vec<f32> = w
        .chunks(per)
        .flat_map(|filter| {
            let bf: Vec<f32> = filter.iter().map(|&v| from_bf16(to_bf16(v))).collect();
            let (inv, step) = scales(bf.iter().fold(0.0f32, |m, v| m.max(v.abs())));
            bf.into_iter().map(move |v| super::quantize(v, inv) as f32 * step)
        })
        .collect();
    let got = int8.download(&held).unwrap();
    assert_eq!(got, want);
    assert!(got.iter().zip(&w).any(|(g, v)| g != v), "the read-back values are the int8 ones");
    let mut part = vec![0.0; 5];
    int8.read(&held, 101, &mut part).unwrap();
    assert_eq!(part, want[101..106]);
    // Writes are refused and change nothing.
    assert!(int8.write(&mut held, 0, &w[..10]).is_err());
    assert!(int8.fill(&mut held, 0, 10, 0.0).is_err());
    assert_eq!(int8.download(&held).unwrap(), want);
    // Another shape with the same number of values, and ops other than conv1d, are refused.
    let other = Conv1dSpec::new(1, 64, 20, 12, 7).dilation(3).pad(9);
    let x_other = int8.upload(&vec![0.5; 64 * 20]).unwrap();
    let mut y_other = int8.alloc(other.n_out() * 12).unwrap();
    let b_other = int8.upload(&[0.0; 12]).unwrap();
    assert!(int8.conv1d(&other, &x_other, &held, Some(&b_other), &mut y_other).is_err());
    let mut c = int8.alloc(20).unwrap();
    let a1 = int8.upload(&vec![1.0; per]).unwrap();
    assert!(int8.gemm(&crate::GemmSpec::linear(1, per, 20), &a1, &held, None, &mut c).is_err());
    // Where the int8 kernel does not apply (grouped), the upload is upload_weight_int8's: a
    // bf16 weight. Without an int8 mode a dense bank is upload_conv_filters's: packed for the
    // bf16 kernel where that runs, else a bf16 weight; either way the bf16 values.
    let grouped = Conv1dSpec::new(1, 30, 8, 8, 3).groups(4).pad(1);
    assert!(int8.upload_conv_filters_int8(&[0.1; 8 * 2 * 3], &grouped).unwrap().is_bf16());
    let bf16 = CpuBf16Backend::with_threads(2).expect("bf16 backend");
    let rounded: Vec<f32> = w.iter().map(|&v| from_bf16(to_bf16(v))).collect();
    for dot in [true, false] {
        let kit = bf16.clone().with_bf16_dot_products(dot);
        let up = kit.upload_conv_filters_int8(&w, &spec).unwrap();
        assert_eq!(up.is_bf16(), !dot, "bf16 dot products {dot}: packed only where they run");
        assert_eq!(kit.download(&up).unwrap(), rounded);
    }
}

/// Deterministic values in `[lo, hi)`.
fn spread(len: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut rng = super::super::test_rng::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..len).map(|_| lo + (hi - lo) * rng.unit() as f32).collect()
}

#[test]
fn fused_adain_snake_conv_gives_the_two_ops_bits_and_never_writes_the_scratch() {
    use crate::spec::InstanceNormSpec;
    let Some(_) = kernel_available("fused instance_norm_snake_conv1d") else { return };
    // Two items, 64 channels (whole AMX int8 tiles) with an offset per channel, so that the
    // norm matters; a dilated k5 'same' conv.
    let norm = InstanceNormSpec { batch: 2, n: 70, c: 64, eps: 1e-5 };
    let conv = Conv1dSpec::new(2, 70, 64, 48, 5).dilation(3).pad(6);
    let x: Vec<f32> = spread(2 * 70 * 64, 1, -1.0, 1.0).iter().enumerate().map(|(i, v)| v * 3.0 + (i % 64) as f32 * 0.1).collect();
    let style = spread(2 * 2 * 64, 2, -0.5, 0.5);
    let alpha = spread(64, 3, 0.2, 2.0);
    let (w, bias) = (spread(48 * 64 * 5, 4, -0.1, 0.1), spread(48, 5, -0.1, 0.1));
    let (n_t, n_y) = (2 * 70 * 64, 2 * conv.n_out() * 48);
    // The int8 mode (VNNI and AMX kernels), and the bf16 kernels (AVX-512 BF16 and AMX) where
    // the CPU has them: each fuses, with its own filters.
    // The int8 tiles on these 64-channel shapes too (the mode gives them to the bf16 tiles).
    let base = CpuBf16Backend::with_int8_convs(2).expect("int8 backend").with_int8_tiles_from_channels(0);
    let mut kits = vec![(base.clone(), true), (base.without_amx(), true)];
    if let Some(bf16) = CpuBf16Backend::with_threads(2).ok().map(|k| k.with_bf16_dot_products(true)).filter(|k| k.bf16_dot_products()) {
        kits.extend([(bf16.clone(), false), (bf16.without_amx(), false)]);
    }
    for (kit, int8_filters) in kits {
        let (xb, sb, ab, bb) =
            (kit.upload(&x).unwrap(), kit.upload(&style).unwrap(), kit.upload(&alpha).unwrap(), kit.upload(&bias).unwrap());
        let affine = (kit.upload(&spread(64, 6, 0.5, 1.5)).unwrap(), kit.upload(&spread(64, 7, -0.2, 0.2)).unwrap());
        let weights = if int8_filters {
            [kit.upload_weight_int8(&w).unwrap(), kit.upload_conv_filters_int8(&w, &conv).unwrap()]
        } else {
            [kit.upload_weight(&w).unwrap(), kit.upload_conv_filters(&w, &conv).unwrap()]
        };
        for (wb, affine) in weights.iter().zip([None, Some((&affine.0, &affine.1))]) {
            // The two ops.
            let (mut t2, mut y2) = (kit.alloc(n_t).unwrap(), kit.alloc(n_y).unwrap());
            kit.instance_norm_snake(&norm, &xb, affine, Some(&sb), &ab, &mut t2).unwrap();
            kit.conv1d(&conv, &t2, wb, Some(&bb), &mut y2).unwrap();
            // Fused: the same bits, and the scratch untouched.
            let mut t = kit.upload(&vec![f32::NAN; n_t]).unwrap();
            let mut y = kit.alloc(n_y).unwrap();
            kit.instance_norm_snake_conv1d(&norm, &xb, affine, Some(&sb), &ab, &conv, wb, Some(&bb), &mut t, &mut y).unwrap();
            let got = kit.download(&y).unwrap();
            assert_eq!(got, kit.download(&y2).unwrap(), "int8 {int8_filters} amx {}: fused ≠ the two ops", kit.amx_convs());
            assert!(kit.download(&t).unwrap().iter().all(|v| v.is_nan()), "int8 {int8_filters}: the fused path wrote the scratch");
            // The residual form: y0 + the same outputs, block by block (70 rows are several
            // blocks here); its input and the scratch left as they were (the outputs are
            // added as they are formed, never written out whole).
            let y0 = spread(n_y, 8, -1.0, 1.0);
            let mut consumed = kit.upload(&x).unwrap();
            let (mut scratch, mut acc) = (kit.upload(&vec![f32::NAN; n_t]).unwrap(), kit.upload(&y0).unwrap());
            kit.instance_norm_snake_conv1d_add(&norm, &mut consumed, affine, Some(&sb), &ab, &conv, wb, Some(&bb), &mut scratch, &mut acc)
                .unwrap();
            let mut want = y0.clone();
            want.iter_mut().zip(&got).for_each(|(a, g)| *a += g);
            assert_eq!(kit.download(&acc).unwrap(), want);
            assert_eq!(kit.download(&consumed).unwrap(), x, "the fused residual form wrote its input");
            assert!(kit.download(&scratch).unwrap().iter().all(|v| v.is_nan()), "the fused residual form wrote the scratch");
            // Wrong variants differ: the conv of the raw rows, and of the norm without Snake.
            let mut y_raw = kit.alloc(n_y).unwrap();
            kit.conv1d(&conv, &xb, wb, Some(&bb), &mut y_raw).unwrap();
            assert_ne!(kit.download(&y_raw).unwrap(), got);
            kit.instance_norm(&norm, &xb, affine, Some(&sb), &mut t2).unwrap();
            kit.conv1d(&conv, &t2, wb, Some(&bb), &mut y_raw).unwrap();
            assert_ne!(kit.download(&y_raw).unwrap(), got);
        }
        // A filter bank one value short is refused with an error by both paths, not packed
        // (reading past it) or run.
        let short = if int8_filters { kit.upload_weight_int8(&w[1..]).unwrap() } else { kit.upload_weight(&w[1..]).unwrap() };
        let (mut t, mut y) = (kit.alloc(n_t).unwrap(), kit.alloc(n_y).unwrap());
        assert!(kit.conv1d(&conv, &xb, &short, Some(&bb), &mut y).is_err());
        assert!(kit.instance_norm_snake_conv1d(&norm, &xb, None, Some(&sb), &ab, &conv, &short, Some(&bb), &mut t, &mut y).is_err());
        // A convolution over other rows than the norm's is refused, not run.
        let other = Conv1dSpec { n: 69, ..conv };
        let (mut t, mut y) = (kit.alloc(n_t).unwrap(), kit.alloc(n_y).unwrap());
        let wb = &weights[0];
        assert!(kit.instance_norm_snake_conv1d(&norm, &xb, None, Some(&sb), &ab, &other, wb, Some(&bb), &mut t, &mut y).is_err());
    }
    // Elsewhere (f32 filters here; the f32 backend) the two ops through the scratch.
    let f32k = CpuBackend::with_threads(2).expect("f32 backend");
    let (mut t2, mut y2) = (vec![0.0; n_t], vec![0.0; n_y]);
    f32k.instance_norm_snake(&norm, &x, None, Some(&style), &alpha, &mut t2).unwrap();
    f32k.conv1d(&conv, &t2, &w, Some(&bias), &mut y2).unwrap();
    let (mut t, mut y) = (vec![f32::NAN; n_t], vec![0.0; n_y]);
    f32k.instance_norm_snake_conv1d(&norm, &x, None, Some(&style), &alpha, &conv, &w, Some(&bias), &mut t, &mut y).unwrap();
    assert_eq!((t, y), (t2, y2));
}

/// A fused convolution's output carries its rows' statistics (formed block by block, in
/// [`STATS_ROWS`] chunks, while each block is in cache) to the fused norm that reads it next:
/// Kokoro's residual step `u = conv(norm(x))`, `x' = x + conv(norm(u))`, `z = conv(norm(x'))`
/// gives the separate ops' bits, on every kernel; the statistics were carried (each output
/// holds them, equal to the norm's own to the bit) and a write to a buffer drops them: after
/// one, the next fused op gives the separate ops' bits on the new values, where stale
/// statistics would not.
#[test]
fn statistics_carried_between_fused_convolutions_give_the_separate_ops_bits() {
    use crate::cpu::seq::{ChannelStats, STATS_ROWS};
    use crate::spec::InstanceNormSpec;
    let Some(_) = kernel_available("statistics carried between fused convolutions") else { return };
    // Two items of 2·STATS_ROWS + 116 rows (a last chunk cut short), 64 channels each way.
    let (batch, n, c) = (2, 2 * STATS_ROWS + 116, 64);
    let norm = InstanceNormSpec { batch, n, c, eps: 1e-5 };
    let conv = Conv1dSpec::new(batch, n, c, c, 5).dilation(3).pad(6);
    let len = batch * n * c;
    let x: Vec<f32> = spread(len, 11, -1.0, 1.0).iter().enumerate().map(|(i, v)| v * 2.0 + (i % c) as f32 * 0.05).collect();
    let style = spread(batch * 2 * c, 12, -0.5, 0.5);
    let alpha = spread(c, 13, 0.2, 2.0);
    let (w1, w2) = (spread(c * c * 5, 14, -0.1, 0.1), spread(c * c * 5, 15, -0.1, 0.1));
    let bias = spread(c, 16, -0.1, 0.1);
    // The int8 tiles on these 64-channel shapes too (the mode gives them to the bf16 tiles).
    let base = CpuBf16Backend::with_int8_convs(2).expect("int8 backend").with_int8_tiles_from_channels(0);
    let mut kits = vec![(base.clone(), true), (base.without_amx(), true)];
    if let Some(bf16) = CpuBf16Backend::with_threads(2).ok().map(|k| k.with_bf16_dot_products(true)).filter(|k| k.bf16_dot_products()) {
        kits.extend([(bf16.clone(), false), (bf16.without_amx(), false)]);
    }
    for (kit, int8_filters) in kits {
        let kit = kit.with_stats_from_bytes(0);
        let up = |v: &[f32]| kit.upload(v).unwrap();
        let filters = |w: &[f32]| if int8_filters { kit.upload_weight_int8(w).unwrap() } else { kit.upload_weight(w).unwrap() };
        let (xb, sb, ab, bb, wb1, wb2) = (up(&x), up(&style), up(&alpha), up(&bias), filters(&w1), filters(&w2));
        let what = format!("int8 {int8_filters} amx {}", kit.amx_convs());
        // The separate ops.
        let apart = |input: &CpuBuf, w: &CpuBuf| {
            let (mut t, mut y) = (kit.alloc(len).unwrap(), kit.alloc(len).unwrap());
            kit.instance_norm_snake(&norm, input, None, Some(&sb), &ab, &mut t).unwrap();
            kit.conv1d(&conv, &t, w, Some(&bb), &mut y).unwrap();
            y
        };
        let u = apart(&xb, &wb1);
        let mut x1 = up(&x);
        kit.axpy(1.0, &apart(&u, &wb2), &mut x1, len).unwrap();
        let z = kit.download(&apart(&x1, &wb1)).unwrap();
        // Fused, each output carrying its statistics to the next op.
        let mut t = kit.alloc(len).unwrap();
        let mut u_f = kit.alloc(len).unwrap();
        kit.instance_norm_snake_conv1d(&norm, &xb, None, Some(&sb), &ab, &conv, &wb1, Some(&bb), &mut t, &mut u_f).unwrap();
        assert!(u_f.2.is_some(), "{what}: the fused output carries no statistics");
        let mut x1_f = up(&x);
        kit.instance_norm_snake_conv1d_add(&norm, &mut u_f, None, Some(&sb), &ab, &conv, &wb2, Some(&bb), &mut t, &mut x1_f).unwrap();
        let x1_host = kit.download(&x1).unwrap();
        assert_eq!(kit.download(&x1_f).unwrap(), x1_host, "{what}: the residual step");
        let carried = x1_f.2.as_deref().expect("the residual step's output carries its statistics");
        for b in 0..batch {
            let own = ChannelStats::of(&x1_host[b * n * c..(b + 1) * n * c], c);
            assert_eq!(carried.for_norm(&norm, b), Some(&own), "{what}: item {b}'s carried statistics");
        }
        let mut z_f = kit.alloc(len).unwrap();
        kit.instance_norm_snake_conv1d(&norm, &x1_f, None, Some(&sb), &ab, &conv, &wb1, Some(&bb), &mut t, &mut z_f).unwrap();
        assert_eq!(kit.download(&z_f).unwrap(), z, "{what}: the norm from carried statistics");
        // Each kind of write drops the statistics; the next fused op then reads the new values'.
        type Write<'a> = (&'a str, &'a dyn Fn(&mut CpuBuf));
        let writes: [Write<'_>; 4] = [
            ("fill", &|b| kit.fill(b, 5 * c, 40, 3.0).unwrap()),
            ("write", &|b| kit.write(b, c, &[4.0; 70]).unwrap()),
            ("copy", &|b| kit.copy(&xb, 0, b, 0, 300).unwrap()),
            ("axpy", &|b| kit.axpy(2.0, &xb, b, len).unwrap()),
        ];
        for (name, write) in writes {
            let mut changed = kit.alloc(len).unwrap();
            kit.instance_norm_snake_conv1d(&norm, &xb, None, Some(&sb), &ab, &conv, &wb1, Some(&bb), &mut t, &mut changed).unwrap();
            assert!(changed.2.is_some());
            write(&mut changed);
            assert!(changed.2.is_none(), "{what}: {name} kept the statistics");
            let want = kit.download(&apart(&changed, &wb2)).unwrap();
            let mut got = kit.alloc(len).unwrap();
            kit.instance_norm_snake_conv1d(&norm, &changed, None, Some(&sb), &ab, &conv, &wb2, Some(&bb), &mut t, &mut got).unwrap();
            assert_eq!(kit.download(&got).unwrap(), want, "{what}: after {name}");
        }
    }
}
