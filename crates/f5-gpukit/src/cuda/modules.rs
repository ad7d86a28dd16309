//! The kernel modules: CUDA sources (always embedded, for the NVRTC fallback), the PTX build.rs
//! made from them (when nvcc was there), and loading them into a context.
//!
//! Load order per module: `KIT_PTX_DIR/<module>.ptx` (a PTX file compiled on the device machine
//! itself, to try a kernel change without rebuilding), then the build-time PTX unless
//! `KIT_FORCE_NVRTC=1`, then NVRTC for the device's own architecture. Embedded PTX that the
//! driver refuses (e.g. built for a newer GPU than the one present) also falls back to NVRTC.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::{KitError, Result};

/// One `kernels/<name>.cu` file and the entry points the backend launches from it.
pub(crate) struct Module {
    pub name: &'static str,
    pub source: &'static str,
    pub ptx: Option<&'static str>,
    pub kernels: &'static [&'static str],
}

macro_rules! module {
    ($name:literal, [$($k:literal),* $(,)?]) => {
        Module {
            name: $name,
            source: include_str!(concat!("../../kernels/", $name, ".cu")),
            #[cfg(kit_ptx)]
            ptx: Some(include_str!(concat!(env!("OUT_DIR"), "/", $name, ".ptx"))),
            #[cfg(not(kit_ptx))]
            ptx: None,
            kernels: &[$($k),*],
        }
    };
}

/// Every module and every entry point; `tests::every_ptx_entry_is_registered` checks this list
/// against the PTX so a kernel cannot exist without a caller (and its CPU twin) or vice versa.
pub(crate) fn modules() -> [Module; 6] {
    [
        module!("norm", ["layer_norm_plain", "layer_norm_affine", "adaln_modulate", "grn_col_norm", "grn_factor", "grn_apply"]),
        module!(
            "elementwise",
            [
                "fill_f32",
                "gated_add",
                "gelu_erf",
                "gelu_tanh",
                "silu",
                "mish",
                "cfg_combine",
                "axpy",
                "mask_rows",
                "polar_spectrum",
                "add_bias_rows",
                "zero_rows",
                "f32_to_bf16",
            ]
        ),
        module!("layout", ["split_heads_rope", "merge_heads", "copy_rows", "embedding"]),
        module!("conv", ["conv1d_depthwise", "conv1d_grouped", "conv1d_direct"]),
        module!("attention", ["attention_d64", "attention_le32", "attention_le64"]),
        module!(
            "seq",
            [
                "conv1d_general",
                "conv_transpose1d",
                "lstm_seq",
                "instance_norm",
                "snake",
                "upsample_nearest",
                "interpolate_linear",
                "pad1d",
                "cumsum_f64",
                "stft_direct",
                "istft_direct",
                "leaky_relu",
                "sigmoid_act",
                "tanh_act",
                "sin_act",
                "exp_act",
                "scale_act",
            ]
        ),
    ]
}

/// Where the kernels came from, for logs and the GPU check's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelSource {
    /// PTX compiled by nvcc at build time.
    BuildTime,
    /// PTX compiled by NVRTC when the backend started.
    Nvrtc,
    /// PTX files from `KIT_PTX_DIR`.
    PtxDir,
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// NVRTC output per (module, architecture option), so a process compiles each module once
/// however many backends it opens (the test suite opens one per test).
static NVRTC_CACHE: Mutex<Vec<(&'static str, String, String)>> = Mutex::new(Vec::new());

fn nvrtc_compile(m: &Module, ctx: &Arc<CudaContext>) -> Result<Ptx> {
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(KitError::Device(format!(
            "kernel module {:?}: no build-time PTX (nvcc was not found when building) and libnvrtc.so.13 cannot be loaded",
            m.name
        )));
    }
    let (major, minor) = ctx.compute_capability().map_err(|e| KitError::Device(format!("cannot read the compute capability: {e}")))?;
    let mut options = vec![format!("--gpu-architecture=compute_{major}{minor}"), "--std=c++17".to_string()];
    // The kernels include no headers; these are for experiments with a KIT_CUDA_INCLUDE override.
    if let Some(inc) = std::env::var_os("KIT_CUDA_INCLUDE") {
        options.push(format!("--include-path={}", inc.to_string_lossy()));
    }
    let key = options.join(" ");
    // Held while compiling: concurrent backends wait for the first compile instead of repeating it.
    let mut cache = NVRTC_CACHE.lock().map_err(|_| KitError::Device("NVRTC cache lock poisoned".into()))?;
    if let Some((_, _, ptx)) = cache.iter().find(|(name, k, _)| *name == m.name && *k == key) {
        return Ok(Ptx::from_src(ptx.clone()));
    }
    let opts = CompileOptions { options, name: Some(format!("{}.cu", m.name)), ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(m.source, opts)
        .map_err(|e| KitError::Device(format!("NVRTC could not compile kernels/{}.cu: {e}", m.name)))?;
    cache.push((m.name, key, ptx.to_src()));
    Ok(ptx)
}

/// Loads every module into `ctx` and returns the functions by name.
pub(crate) fn load_all(ctx: &Arc<CudaContext>) -> Result<(HashMap<&'static str, CudaFunction>, KernelSource)> {
    let ptx_dir = std::env::var_os("KIT_PTX_DIR").map(std::path::PathBuf::from);
    let force_nvrtc = env_flag("KIT_FORCE_NVRTC");
    let mut functions = HashMap::new();
    let mut source = KernelSource::BuildTime;
    for m in modules() {
        let loaded = if let Some(dir) = &ptx_dir {
            source = KernelSource::PtxDir;
            let path = dir.join(format!("{}.ptx", m.name));
            let text = std::fs::read_to_string(&path).map_err(|e| KitError::Device(format!("cannot read {}: {e}", path.display())))?;
            ctx.load_module(Ptx::from_src(text)).map_err(|e| KitError::Device(format!("the driver refused {}: {e}", path.display())))?
        } else {
            let embedded = if force_nvrtc { None } else { m.ptx };
            match embedded.map(|p| ctx.load_module(Ptx::from_src(p))) {
                Some(Ok(module)) => module,
                other => {
                    let refused = match other {
                        Some(Err(e)) => format!(" (the driver refused the build-time PTX: {e})"),
                        _ => String::new(),
                    };
                    source = KernelSource::Nvrtc;
                    let ptx = nvrtc_compile(&m, ctx).map_err(|e| KitError::Device(format!("{e}{refused}")))?;
                    ctx.load_module(ptx)
                        .map_err(|e| KitError::Device(format!("the driver refused the NVRTC PTX of kernels/{}.cu: {e}{refused}", m.name)))?
                }
            }
        };
        for &k in m.kernels {
            let f = loaded.load_function(k).map_err(|e| KitError::Device(format!("kernel {k} missing from module {}: {e}", m.name)))?;
            functions.insert(k, f);
        }
    }
    Ok((functions, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(ptx: &str) -> Vec<String> {
        ptx.lines()
            .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
            .map(|rest| rest.split('(').next().unwrap_or("").trim().to_string())
            .collect()
    }

    /// The kernels found in a module's PTX or source are exactly those its registry lists.
    fn assert_registered(mut found: Vec<String>, m: &Module, context: &str) {
        found.sort();
        let mut want: Vec<String> = m.kernels.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(found, want, "module {}: {context}", m.name);
    }

    /// The registry and the compiled kernels agree. Needs build-time PTX (CI builds with nvcc);
    /// without it the sources are scanned for `extern "C" __global__` instead.
    #[test]
    fn every_ptx_entry_is_registered() {
        for m in modules() {
            let found = match m.ptx {
                Some(ptx) => entries(ptx),
                None => m
                    .source
                    .split("extern \"C\" __global__ void ")
                    .skip(1)
                    .map(|rest| {
                        // `__launch_bounds__(N) name(` or `name(`
                        let rest = match rest.strip_prefix("__launch_bounds__") {
                            Some(r) => r.split_once(')').map_or("", |(_, after)| after),
                            None => rest,
                        };
                        rest.split('(').next().unwrap_or("").trim().to_string()
                    })
                    .collect(),
            };
            assert_registered(found, &m, "kernels in the source/PTX vs the registry");
        }
    }

    /// The run-time fallback compiles every module (no device needed, only libnvrtc.so.13 on the
    /// loader path); skips where libnvrtc is absent.
    #[test]
    fn nvrtc_compiles_every_module() {
        // SAFETY: only probes whether the shared library can be opened.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("SKIP nvrtc_compiles_every_module: libnvrtc.so.13 not found");
            return;
        }
        for m in modules() {
            let opts = CompileOptions { options: vec!["--gpu-architecture=compute_90".into(), "--std=c++17".into()], ..Default::default() };
            let ptx = cudarc::nvrtc::compile_ptx_with_opts(m.source, opts).unwrap_or_else(|e| panic!("kernels/{}.cu: {e}", m.name));
            let text = ptx.to_src();
            assert_registered(entries(&text), &m, "compiled by NVRTC");
        }
    }

    #[test]
    fn ptx_targets_a_driver_13_0_isa() {
        for m in modules() {
            if let Some(ptx) = m.ptx {
                // nvcc 13.0 writes `.version 9.0`; a newer nvcc would write an ISA that a CUDA
                // 13.0 driver cannot JIT.
                let version = ptx.lines().find_map(|l| l.strip_prefix(".version ")).unwrap_or("");
                assert_eq!(version.trim(), "9.0", "module {}: PTX ISA {version}", m.name);
            }
        }
    }
}
