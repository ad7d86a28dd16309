//! CUDA-only checks that the shared op table (tests/ops.rs) cannot express: the bf16 weight
//! path, and that opening a device fails cleanly where there is none. Tests that need a device
//! print SKIP without one, and fail instead when `KIT_REQUIRE_GPU=1`.

use super::*;
use crate::{CpuBackend, GemmSpec};

fn require_gpu() -> bool {
    std::env::var("KIT_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

fn device(options: CudaOptions, test: &str) -> Option<CudaBackend> {
    match CudaBackend::with_options(0, options) {
        Ok(k) => Some(k),
        Err(e) if require_gpu() => panic!("{test}: KIT_REQUIRE_GPU=1 but no usable CUDA device: {e}"),
        Err(e) => {
            eprintln!("SKIP {test}: no CUDA device ({e})");
            None
        }
    }
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) % 2001) as f32 / 1000.0 - 1.0).collect()
}

/// No device, no driver or a bad ordinal is an error, never a panic or an abort.
#[test]
fn opening_a_missing_device_is_an_error() {
    let err = CudaBackend::new(4096).err();
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.starts_with("device:"), "ordinal 4096 must be refused with a device error, got {msg:?}");
}

/// bf16 weights: a Linear GEMM through cublasGemmEx against the f32 CPU GEMM. bf16 keeps 8
/// significant bits (relative rounding 2^-9 per input), so each product errs by ≲ 2·2^-9 and a
/// sum of k products of O(1) values by ≈ 2^-8·√k typically; 4e-3·√k bounds it with margin while a
/// wrong layout is off by O(√k).
#[test]
fn bf16_weight_gemm_matches_cpu() {
    let Some(gpu) = device(CudaOptions { weights: WeightPrecision::Bf16 }, "bf16_weight_gemm_matches_cpu") else {
        return;
    };
    let cpu = CpuBackend::new();
    for &(m, k, n) in &[(1, 1, 1), (7, 64, 33), (130, 257, 95), (256, 1024, 1024)] {
        let spec = GemmSpec::linear(m, k, n);
        let (x, w, b) = (values(m * k, 1), values(n * k, 2), values(n, 3));
        let want = {
            let (xb, wb, bb) = (cpu.upload(&x).unwrap(), cpu.upload_weight(&w).unwrap(), cpu.upload(&b).unwrap());
            let mut y = cpu.alloc(m * n).unwrap();
            cpu.gemm(&spec, &xb, &wb, Some(&bb), &mut y).unwrap();
            y
        };
        let xg = gpu.upload(&x).unwrap();
        let wg = gpu.upload_weight(&w).unwrap();
        assert!(wg.has_bf16());
        let bg = gpu.upload(&b).unwrap();
        let mut yg = gpu.alloc(m * n + 5).unwrap();
        gpu.fill(&mut yg, 0, m * n + 5, -9.0).unwrap();
        gpu.gemm(&spec, &xg, &wg, Some(&bg), &mut yg).unwrap();
        let got = gpu.download(&yg).unwrap();
        let tol = 4e-3 * (k as f32).sqrt();
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= tol, "{m}×{k}×{n} element {i}: bf16 {g} vs f32 {w} (tolerance {tol})");
        }
        assert!(got[m * n..].iter().all(|&v| v == -9.0), "{m}×{k}×{n}: values past the output were written");
    }
}

/// With the default options weights stay f32 and GEMMs agree with the CPU to f32 rounding.
#[test]
fn f32_weights_have_no_bf16_copy() {
    let Some(gpu) = device(CudaOptions::default(), "f32_weights_have_no_bf16_copy") else {
        return;
    };
    let w = gpu.upload_weight(&[1.0, 2.0]).unwrap();
    assert!(!w.has_bf16());
    assert_eq!(gpu.download(&w).unwrap(), vec![1.0, 2.0]);
}

/// A captured graph replays the same ops: an axpy run eagerly, then twice from the graph.
#[test]
fn graph_replay_repeats_the_ops() {
    let Some(gpu) = device(CudaOptions::default(), "graph_replay_repeats_the_ops") else {
        return;
    };
    let x = gpu.upload(&[1.0, 2.0, 3.0]).unwrap();
    let mut y = gpu.upload(&[0.0; 3]).unwrap();
    let graph = gpu.capture(|| gpu.axpy(2.0, &x, &mut y, 3)).unwrap();
    assert_eq!(gpu.download(&y).unwrap(), vec![0.0; 3], "capture must not execute the ops");
    graph.replay().unwrap();
    graph.replay().unwrap();
    assert_eq!(gpu.download(&y).unwrap(), vec![4.0, 8.0, 12.0]);
}

/// A graph keeps the bf16 scratch it recorded: capture a small bf16 GEMM (the activation is
/// staged through scratch), let a longer eager bf16 GEMM grow the scratch (which would free the
/// recorded one if nothing pinned it), then replay and compare with the eager result of the same
/// small GEMM. Freed-and-reused scratch shows up as a wrong result or an illegal address.
#[test]
fn graph_keeps_its_bf16_scratch_across_a_larger_eager_gemm() {
    let Some(gpu) = device(CudaOptions { weights: WeightPrecision::Bf16 }, "graph_keeps_its_bf16_scratch") else {
        return;
    };
    let (m, k, n) = (4, 64, 8);
    let spec = GemmSpec::linear(m, k, n);
    let x = gpu.upload(&values(m * k, 11)).unwrap();
    let w = gpu.upload_weight(&values(n * k, 12)).unwrap();
    let mut y = gpu.alloc(m * n).unwrap();
    gpu.gemm(&spec, &x, &w, None, &mut y).unwrap(); // eager first: scratch exists before capture
    let want = gpu.download(&y).unwrap();
    gpu.fill(&mut y, 0, m * n, 0.0).unwrap();
    let graph = gpu.capture(|| gpu.gemm(&spec, &x, &w, None, &mut y)).unwrap();

    // 64× the activation: the scratch must grow past what the graph recorded.
    let (m2, k2, n2) = (256, 1024, 64);
    let big = GemmSpec::linear(m2, k2, n2);
    let (xb, wb) = (gpu.upload(&values(m2 * k2, 13)).unwrap(), gpu.upload_weight(&values(n2 * k2, 14)).unwrap());
    let mut yb = gpu.alloc(m2 * n2).unwrap();
    gpu.gemm(&big, &xb, &wb, None, &mut yb).unwrap();
    gpu.synchronize().unwrap();

    graph.replay().unwrap();
    assert_eq!(gpu.download(&y).unwrap(), want, "the replayed GEMM must equal the eager one");
    drop(graph);
    // With the graph gone the retired scratch is released; the backend keeps working.
    gpu.gemm(&big, &xb, &wb, None, &mut yb).unwrap();
    gpu.synchronize().unwrap();
}

/// A scratch that would have to grow inside a capture is refused with advice, not allocated.
#[test]
fn capture_refuses_to_grow_scratch() {
    let Some(gpu) = device(CudaOptions { weights: WeightPrecision::Bf16 }, "capture_refuses_to_grow_scratch") else {
        return;
    };
    let spec = GemmSpec::linear(3, 16, 4);
    let x = gpu.upload(&values(3 * 16, 1)).unwrap();
    let w = gpu.upload_weight(&values(4 * 16, 2)).unwrap();
    let mut y = gpu.alloc(12).unwrap();
    let err = gpu.capture(|| gpu.gemm(&spec, &x, &w, None, &mut y)).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("eagerly before capturing"), "{err}");
    // The stream left capture mode: eager work runs.
    gpu.gemm(&spec, &x, &w, None, &mut y).unwrap();
    gpu.synchronize().unwrap();
}

/// Ops that copy host data (the LSTM's lengths, the embedding's ids) cannot be recorded: the
/// capture fails with a message naming the op, and the backend stays usable.
#[test]
fn capture_refuses_host_copies() {
    let Some(gpu) = device(CudaOptions::default(), "capture_refuses_host_copies") else {
        return;
    };
    let table = gpu.upload(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    let mut out = gpu.alloc(2).unwrap();
    let err = gpu.capture(|| gpu.embedding(&table, 2, &[1], &mut out)).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("embedding cannot be captured"), "{err}");
    let spec = crate::LstmSpec { batch: 1, n: 1, hidden: 1, reverse: false, out: crate::StridedRows { offset: 0, row_stride: 1 } };
    let (gx, whh) = (gpu.upload(&[0.5; 4]).unwrap(), gpu.upload(&[0.1; 4]).unwrap());
    let mut h = gpu.alloc(1).unwrap();
    let err = gpu.capture(|| gpu.lstm(&spec, &[1], &gx, &whh, None, &mut h)).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("lstm cannot be captured"), "{err}");
    gpu.embedding(&table, 2, &[1], &mut out).unwrap();
    assert_eq!(gpu.download(&out).unwrap(), vec![3.0, 4.0]);
}

/// GRN reuses its norm scratch, so a ConvNeXt block can be captured once it has run eagerly.
#[test]
fn grn_replays_from_a_graph() {
    let Some(gpu) = device(CudaOptions::default(), "grn_replays_from_a_graph") else {
        return;
    };
    let (batch, n, d) = (2, 5, 7);
    let x0 = values(batch * n * d, 5);
    let (gamma, beta) = (gpu.upload(&values(d, 6)).unwrap(), gpu.upload(&values(d, 7)).unwrap());
    let mut x = gpu.upload(&x0).unwrap();
    gpu.grn(&mut x, batch, n, d, &gamma, &beta, 1e-6).unwrap();
    let want = gpu.download(&x).unwrap();
    gpu.write(&mut x, 0, &x0).unwrap();
    let graph = gpu.capture(|| gpu.grn(&mut x, batch, n, d, &gamma, &beta, 1e-6)).unwrap();
    graph.replay().unwrap();
    assert_eq!(gpu.download(&x).unwrap(), want);
}
