//! Elementwise math on host slices, on the calling thread, with the CPU backend's own vector
//! kernels: for model code that computes a stage on the host in blocks (Kokoro's harmonic
//! source), so that it gives the values the kit's ops give without holding a buffer for the
//! whole stage.
//!
//! ```
//! # fn main() -> Result<(), f5_gpukit::KitError> {
//! use f5_gpukit::InterpolateSpec;
//! // Channel 1 of a ×4 linear upsample of three 2-channel rows, output rows 2..6.
//! let spec = InterpolateSpec::by_scale(1, 3, 2, 4.0);
//! let x = [0.0f32, 10.0, 1.0, 20.0, 2.0, 30.0];
//! let mut out = [0.0f32; 4];
//! f5_gpukit::host::interpolate_channel(&spec, &x, 1, 2, &mut out)?;
//! assert_eq!(out, [11.25, 13.75, 16.25, 18.75]);
//!
//! let mut x = [0.0f32, 1.0, -2.5];
//! f5_gpukit::host::sin(&mut x);
//! assert_eq!(x[0], 0.0);
//! assert!((x[1] - 1.0f32.sin()).abs() <= f32::EPSILON);
//! # Ok(()) }
//! ```

/// `x = sin(x)` in place: the kernel behind [`Activation::Sin`](crate::Activation::Sin) on the
/// CPU backends (through f64, vectorised: libm's value or one ulp from it). Where some |x| of
/// the slice reaches 10⁶ (or is not finite) the whole slice takes libm's `sinf`, so a value's
/// last bit can depend on its neighbours only past that magnitude.
pub fn sin(x: &mut [f32]) {
    crate::cpu::simd::map_sin(x)
}

/// Channel `channel` of output rows `first..first + out.len()` of
/// [`Backend::interpolate_linear`](crate::Backend::interpolate_linear) over item 0 of `x`
/// (`[n_in, c]` rows), each value the op's own: for a caller that needs one channel, a block of
/// rows at a time, of an output too large to hold (Kokoro's source upsamples 9 phase tracks
/// ×300).
pub fn interpolate_channel(spec: &crate::InterpolateSpec, x: &[f32], channel: usize, first: usize, out: &mut [f32]) -> crate::Result<()> {
    let op = "interpolate_channel";
    if channel >= spec.c {
        return Err(crate::shape_err(op, format!("channel {channel} of {}", spec.c)));
    }
    if first.checked_add(out.len()).is_none_or(|end| end > spec.n_out) {
        return Err(crate::shape_err(op, format!("rows {first}..+{} of {}", out.len(), spec.n_out)));
    }
    if out.is_empty() {
        return Ok(());
    }
    if spec.n_in == 0 || spec.n_in.checked_mul(spec.c).is_none_or(|n| x.len() < n) || !(spec.ratio.is_finite() && spec.ratio > 0.0) {
        return Err(crate::shape_err(op, format!("{} values for {} rows of {} (ratio {})", x.len(), spec.n_in, spec.c, spec.ratio)));
    }
    crate::cpu::simd::interpolate_channel(spec, x, channel, first, out);
    Ok(())
}
