//! `--device` and `--precision`: which backend of the kit runs the model, and how.

use anyhow::{anyhow, bail, Result};

/// A parsed `--device` / `--precision` pair. Parsing does not depend on the build, so a CPU-only
/// build still understands `cuda` and can say why it cannot use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    Cpu,
    Cuda { ordinal: usize, bf16: bool },
}

pub fn parse(device: &str, precision: &str) -> Result<DeviceChoice> {
    let bf16 = match precision.trim().to_ascii_lowercase().as_str() {
        "f32" | "fp32" | "float32" => false,
        "bf16" | "bfloat16" => true,
        other => bail!("--precision {other:?}: use f32 or bf16"),
    };
    let device = device.trim().to_ascii_lowercase();
    let choice = match device.as_str() {
        "cpu" => DeviceChoice::Cpu,
        "cuda" | "gpu" => DeviceChoice::Cuda { ordinal: 0, bf16 },
        other => match other.strip_prefix("cuda:") {
            Some(n) => match n.parse::<usize>() {
                Ok(ordinal) => DeviceChoice::Cuda { ordinal, bf16 },
                Err(_) => bail!("--device {other:?}: the device number after cuda: must be 0, 1, …"),
            },
            None => bail!("--device {other:?}: use cpu, cuda or cuda:N"),
        },
    };
    if choice == DeviceChoice::Cpu && bf16 {
        bail!("--precision bf16 needs --device cuda: the CPU backend computes in f32");
    }
    Ok(choice)
}

/// The error a build without the `cuda` feature gives for `--device cuda`.
#[cfg_attr(feature = "cuda", allow(dead_code))]
pub fn no_cuda() -> anyhow::Error {
    anyhow!("this f5 was built without CUDA support; rebuild it with `cargo build --release -p f5-cli --features cuda`")
}

#[cfg(test)]
mod tests {
    use super::{parse, DeviceChoice};

    #[test]
    fn devices_and_precisions_parse_or_explain() {
        assert_eq!(parse("cpu", "f32").unwrap(), DeviceChoice::Cpu);
        assert_eq!(parse("CUDA", "bf16").unwrap(), DeviceChoice::Cuda { ordinal: 0, bf16: true });
        assert_eq!(parse("cuda:3", "f32").unwrap(), DeviceChoice::Cuda { ordinal: 3, bf16: false });
        for (device, precision, needle) in [
            ("cpu", "bf16", "needs --device cuda"),
            ("cuda:x", "f32", "device number"),
            ("tpu", "f32", "use cpu, cuda"),
            ("cpu", "f16", "use f32 or bf16"),
        ] {
            let err = parse(device, precision).unwrap_err().to_string();
            assert!(err.contains(needle), "{device}/{precision}: {err}");
        }
    }
}
