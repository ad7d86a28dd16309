//! `--device` and `--precision` are parsed by the kit ([`f5_gpukit::DeviceChoice`]), so the
//! pipeline and the daemon understand the same names; this is what the binary adds.

/// The error a build without the `cuda` feature gives for `--device cuda`.
#[cfg_attr(feature = "cuda", allow(dead_code))]
pub fn no_cuda() -> anyhow::Error {
    anyhow::anyhow!("this f5 was built without CUDA support; rebuild it with `cargo build --release -p f5-cli --features cuda`")
}
