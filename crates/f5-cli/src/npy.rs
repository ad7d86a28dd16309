//! `.npy` in and out, with the project's conventions: a mel is float32 `[frames, 100]` in C
//! order; a waveform is float32 samples at 24 kHz.

use std::path::Path;

use anyhow::{bail, Context, Result};
use npyz::WriterBuilder;

/// Writes a float32 array of the given shape.
pub fn write_f32(path: &Path, shape: &[u64], data: &[f32]) -> Result<()> {
    let expected: u64 = shape.iter().product();
    if expected != data.len() as u64 {
        bail!("internal: {} values for shape {shape:?}", data.len());
    }
    let tmp = path.with_extension("npy.partial");
    {
        let file = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(std::io::BufWriter::new(file)).begin_nd()?;
        w.extend(data.iter().copied())?;
        w.finish()?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a float32 (or float64, converted) array and its shape.
pub fn read_f32(path: &Path) -> Result<(Vec<u64>, Vec<f32>)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).with_context(|| format!("{} is not a .npy file", path.display()))?;
    let shape = npy.shape().to_vec();
    let order = npy.order();
    if shape.len() > 1 && order == npyz::Order::Fortran {
        bail!("{}: Fortran-ordered arrays are not supported; save it in C order", path.display());
    }
    let descr = npy.dtype().descr();
    let data = if descr.contains("f4") {
        npy.into_vec::<f32>()?
    } else if descr.contains("f8") {
        npy.into_vec::<f64>()?.into_iter().map(|v| v as f32).collect()
    } else {
        bail!("{}: expected float32 data, found dtype {descr}", path.display())
    };
    Ok((shape, data))
}
