//! Compiles `kernels/*.cu` to PTX with nvcc when the `cuda` feature is on.
//!
//! nvcc is looked up in `NVCC`, then `CUDA_HOME`/`CUDA_PATH`, then `PATH`. Without it the build
//! only warns: the crate then embeds the CUDA sources and compiles them with NVRTC when the
//! backend starts. `KIT_REQUIRE_NVCC=1` (CI, GPU release builds) turns a missing nvcc into an
//! error so the run-time fallback can never silently become what ships. Every module is also run
//! through `ptxas -v`, whose register/shared-memory/spill report is printed as build warnings when
//! `KIT_PTXAS_VERBOSE=1`, and whose failure fails the build. No PTX is committed.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `kernels/<name>.cu` → `$OUT_DIR/<name>.ptx`. Keep in step with `src/cuda/modules.rs`.
const MODULES: &[&str] = &["norm", "elementwise", "layout", "conv", "attention", "seq"];

fn find_nvcc() -> Option<PathBuf> {
    if let Some(p) = env::var_os("NVCC").filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = env::var_os(var) {
            let p = Path::new(&home).join("bin").join("nvcc");
            if p.exists() {
                return Some(p);
            }
        }
    }
    env::var_os("PATH").and_then(|paths| env::split_paths(&paths).map(|d| d.join("nvcc")).find(|p| p.is_file()))
}

fn flag(name: &str) -> bool {
    env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kit_ptx)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    for m in MODULES {
        println!("cargo:rerun-if-changed=kernels/{m}.cu");
    }
    for v in ["NVCC", "CUDA_HOME", "CUDA_PATH", "KIT_CUDA_ARCH", "KIT_REQUIRE_NVCC", "KIT_PTXAS_VERBOSE"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let Some(out) = env::var_os("OUT_DIR").map(PathBuf::from) else {
        panic!("OUT_DIR is not set: build.rs must run under cargo");
    };
    let arch = env::var("KIT_CUDA_ARCH").unwrap_or_else(|_| "sm_90".into());
    let Some(nvcc) = find_nvcc() else {
        if flag("KIT_REQUIRE_NVCC") {
            panic!("KIT_REQUIRE_NVCC is set but no nvcc was found (NVCC, CUDA_HOME, PATH): run scripts/install-nvcc.sh and set NVCC");
        }
        println!(
            "cargo:warning=nvcc not found (NVCC, CUDA_HOME, PATH): the CUDA kernels will be compiled with NVRTC when the backend starts"
        );
        return;
    };
    let verbose = flag("KIT_PTXAS_VERBOSE");
    let ptxas = nvcc.with_file_name("ptxas");
    for m in MODULES {
        let src = format!("kernels/{m}.cu");
        let ptx = out.join(format!("{m}.ptx"));
        // No --use_fast_math: the kernels must match the CPU twin to ~1e-6.
        let res = Command::new(&nvcc).args(["-ptx", "-O3", "-std=c++17", &format!("-arch={arch}"), "-o"]).arg(&ptx).arg(&src).output();
        match res {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!("nvcc failed on {src}:\n{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
            Err(e) => panic!("cannot run {}: {e}", nvcc.display()),
        }
        // ptxas is what the driver's JIT does at load time: running it here finds register
        // overflows and ISA problems on a machine without a GPU.
        if ptxas.exists() {
            let res =
                Command::new(&ptxas).args(["-v", &format!("-arch={arch}"), "-o"]).arg(out.join(format!("{m}.cubin"))).arg(&ptx).output();
            match res {
                Ok(o) if o.status.success() => {
                    if verbose {
                        report_ptxas(m, &String::from_utf8_lossy(&o.stderr));
                    }
                }
                Ok(o) => panic!("ptxas failed on {m}.ptx:\n{}", String::from_utf8_lossy(&o.stderr)),
                Err(e) => panic!("cannot run {}: {e}", ptxas.display()),
            }
        }
    }
    println!("cargo:rustc-cfg=kit_ptx");
}

/// One warning line per kernel: `ptxas <module>::<kernel>: N registers, S bytes smem, spill X/Y`.
fn report_ptxas(module: &str, log: &str) {
    let mut kernel = String::new();
    let mut spill = String::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            kernel = rest.split('\'').next().unwrap_or("").to_string();
        } else if line.contains("spill stores") {
            spill = line.trim_start_matches("ptxas info    :").trim().to_string();
        } else if line.contains("Used") && line.contains("registers") {
            let used = line.split("Used").nth(1).unwrap_or("").trim();
            println!("cargo:warning=ptxas {module}::{kernel}: Used {used}; {spill}");
        }
    }
}
