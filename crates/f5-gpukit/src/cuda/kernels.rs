//! Every kernel's argument list, declared once: one typed launcher per `extern "C" __global__`
//! function of `kernels/*.cu`, with the C parameter names and kinds (`DevPtr` for any pointer,
//! `u64` for `u64`/`unsigned long long`, `f32` for `float`, `i32` for `int`). A call site passes
//! typed values, so a missing, extra or mistyped argument is a compile error, and the test below
//! parses the CUDA sources and checks every declaration against its C signature (names, kinds,
//! order) — a kernel edited on one side only fails the build's tests instead of reading garbage.

use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};

use super::{dev_err, CudaBackend};
use crate::Result;

/// A device address passed to a kernel pointer parameter (`float*`, `const u64*`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct DevPtr(pub u64);

impl DevPtr {
    /// For an optional operand the kernel does not read (its `has_…` flag is 0).
    pub const NULL: DevPtr = DevPtr(0);
}

// SAFETY: a plain 64-bit value, passed by value exactly like the `u64` it wraps.
unsafe impl DeviceRepr for DevPtr {}

/// The typed launchers; obtained with [`CudaBackend::k`].
pub(crate) struct Kernels<'a> {
    kit: &'a CudaBackend,
}

impl CudaBackend {
    /// The typed kernel launchers of this backend.
    pub(crate) fn k(&self) -> Kernels<'_> {
        Kernels { kit: self }
    }
}

macro_rules! kernels {
    ($($name:ident($($arg:ident: $ty:ident),* $(,)?);)*) => {
        impl Kernels<'_> {
            $(
                /// Launches the kernel of the same name; `None` (nothing to do) launches nothing.
                #[allow(clippy::too_many_arguments, dead_code)]
                pub fn $name(&self, cfg: impl Into<Option<LaunchConfig>>, $($arg: $ty),*) -> Result<()> {
                    let Some(cfg) = cfg.into() else { return Ok(()) };
                    let _op = self.kit.gate.enter()?;
                    let f = self.kit.kernel(stringify!($name))?;
                    let mut builder = self.kit.stream.launch_builder(f);
                    $( builder.arg(&$arg); )*
                    // SAFETY: the argument list is the kernel's C signature (checked against the
                    // source by `declarations_match_the_cuda_sources`), and the op validated that
                    // each pointer + extent lies inside its buffer.
                    unsafe { builder.launch(cfg) }.map(|_| ()).map_err(dev_err(concat!("launching ", stringify!($name))))
                }
            )*
        }

        /// `(kernel, [(parameter, kind)])` for every declaration, for the signature test.
        #[cfg(test)]
        pub(crate) const DECLARED: &[(&str, &[(&str, &str)])] = &[
            $( (stringify!($name), &[$((stringify!($arg), stringify!($ty))),*]) ),*
        ];
    };
}

kernels! {
    // attention.cu
    attention_d64(q: DevPtr, k: DevPtr, v: DevPtr, out: DevPtr, batch_heads: u64, n: u64, scale: f32);
    attention_le32(q: DevPtr, k: DevPtr, v: DevPtr, out: DevPtr, batch_heads: u64, n: u64, d: u64, scale: f32);
    attention_le64(q: DevPtr, k: DevPtr, v: DevPtr, out: DevPtr, batch_heads: u64, n: u64, d: u64, scale: f32);
    // conv.cu
    conv1d_depthwise(x: DevPtr, w: DevPtr, bias: DevPtr, y: DevPtr, batch: u64, n: u64, c: u64, kernel: u64, pad: u64, n_out: u64, has_bias: i32);
    conv1d_grouped(x: DevPtr, w: DevPtr, bias: DevPtr, y: DevPtr, n: u64, c_in: u64, c_out: u64, kernel: u64, pad: u64, groups: u64, n_out: u64, tiles_per_group: u64, has_bias: i32);
    conv1d_direct(x: DevPtr, w: DevPtr, bias: DevPtr, y: DevPtr, batch: u64, n: u64, c_in: u64, c_out: u64, kernel: u64, pad: u64, groups: u64, n_out: u64, has_bias: i32);
    // elementwise.cu
    fill_f32(x: DevPtr, len: u64, value: f32);
    gated_add(x: DevPtr, y: DevPtr, g: DevPtr, total: u64, d: u64);
    gelu_erf(x: DevPtr, len: u64);
    gelu_tanh(x: DevPtr, len: u64);
    silu(x: DevPtr, len: u64);
    mish(x: DevPtr, len: u64);
    cfg_combine(pred: DevPtr, out: DevPtr, half: u64, strength: f32);
    axpy(a: f32, x: DevPtr, y: DevPtr, len: u64);
    mask_rows(x: DevPtr, keep: DevPtr, total: u64, d: u64);
    polar_spectrum(h: DevPtr, re: DevPtr, im: DevPtr, frames: u64, bins: u64, mag_max: f32);
    add_bias_rows(c: DevPtr, bias: DevPtr, batch: u64, m: u64, n: u64, ldc: u64, batch_stride: u64);
    zero_rows(c: DevPtr, batch: u64, m: u64, n: u64, ldc: u64, batch_stride: u64);
    f32_to_bf16(x: DevPtr, y: DevPtr, len: u64);
    // layout.cu
    split_heads_rope(src: DevPtr, cos_t: DevPtr, sin_t: DevPtr, dst: DevPtr, batch: u64, n: u64, heads: u64, hd: u64, rope_heads: u64, src_off: u64, src_stride: u64);
    merge_heads(src: DevPtr, dst: DevPtr, batch: u64, n: u64, heads: u64, hd: u64);
    copy_rows(src: DevPtr, src_stride: u64, dst: DevPtr, dst_stride: u64, rows: u64, width: u64);
    embedding(table: DevPtr, ids: DevPtr, out: DevPtr, count: u64, dim: u64);
    // norm.cu
    layer_norm_plain(x: DevPtr, out: DevPtr, rows: u64, d: u64, eps: f32);
    layer_norm_affine(x: DevPtr, out: DevPtr, rows: u64, d: u64, eps: f32, w: DevPtr, b: DevPtr);
    adaln_modulate(x: DevPtr, out: DevPtr, rows: u64, d: u64, eps: f32, shift: DevPtr, scale: DevPtr);
    grn_col_norm(x: DevPtr, g: DevPtr, batch: u64, n: u64, d: u64);
    grn_factor(g: DevPtr, batch: u64, d: u64, eps: f32);
    grn_apply(x: DevPtr, f: DevPtr, gamma: DevPtr, beta: DevPtr, batch: u64, n: u64, d: u64);
    // seq.cu
    conv1d_general(x: DevPtr, w: DevPtr, bias: DevPtr, y: DevPtr, batch: u64, n: u64, c_in: u64, c_out: u64, kernel: u64, pad: u64, groups: u64, n_out: u64, stride: u64, dilation: u64, pad_mode: i32, has_bias: i32);
    conv_transpose1d(x: DevPtr, w: DevPtr, bias: DevPtr, y: DevPtr, batch: u64, n: u64, c_in: u64, c_out: u64, kernel: u64, stride: u64, pad: u64, groups: u64, n_out: u64, has_bias: i32);
    lstm_seq(gates_x: DevPtr, w_hh: DevPtr, h0: DevPtr, c0: DevPtr, lengths: DevPtr, out: DevPtr, batch: u64, n: u64, hidden: u64, reverse: i32, out_offset: u64, out_stride: u64, has_state: i32);
    instance_norm(x: DevPtr, out: DevPtr, batch: u64, n: u64, c: u64, eps: f32, weight: DevPtr, bias: DevPtr, style: DevPtr, has_affine: i32, has_style: i32);
    snake(x: DevPtr, alpha: DevPtr, total: u64, c: u64);
    upsample_nearest(x: DevPtr, out: DevPtr, total: u64, n: u64, c: u64, factor: u64);
    interpolate_linear(x: DevPtr, out: DevPtr, batch: u64, n_in: u64, n_out: u64, c: u64, ratio: f32);
    pad1d(x: DevPtr, out: DevPtr, batch: u64, n: u64, c: u64, left: u64, n_out: u64, mode: i32);
    cumsum_f64(x: DevPtr, out: DevPtr, batch: u64, n: u64, c: u64);
    stft_direct(signal: DevPtr, mag: DevPtr, phase: DevPtr, batch: u64, frames: u64, n_fft: u64, hop: u64);
    istft_direct(mag: DevPtr, phase: DevPtr, signal: DevPtr, batch: u64, frames: u64, n_fft: u64, hop: u64);
    leaky_relu(x: DevPtr, len: u64, slope: f32);
    sigmoid_act(x: DevPtr, len: u64);
    tanh_act(x: DevPtr, len: u64);
    sin_act(x: DevPtr, len: u64);
    exp_act(x: DevPtr, len: u64);
    scale_act(x: DevPtr, len: u64, factor: f32);
}

#[cfg(test)]
mod tests {
    use super::DECLARED;
    use crate::cuda::modules::modules;

    /// `(kernel, [(parameter, kind)])` of every `extern "C" __global__` function in a source.
    fn parse_signatures(source: &str) -> Vec<(String, Vec<(String, String)>)> {
        source
            .split("extern \"C\" __global__ void ")
            .skip(1)
            .map(|rest| {
                let rest = match rest.trim_start().strip_prefix("__launch_bounds__") {
                    Some(r) => r.split_once(')').map_or("", |(_, after)| after),
                    None => rest,
                };
                let (name, after) = rest.split_once('(').unwrap_or((rest, ""));
                let params = after.split_once(')').map_or("", |(p, _)| p);
                let params = params
                    .split(',')
                    .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let pname: String = p.chars().rev().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                        let pname: String = pname.chars().rev().collect();
                        let ty = p[..p.len() - pname.len()].trim();
                        let kind = if ty.contains('*') {
                            "DevPtr"
                        } else {
                            match ty {
                                "u64" | "unsigned long long" => "u64",
                                "float" => "f32",
                                "int" => "i32",
                                other => panic!("kernel {name}: parameter {pname} has a type ({other}) with no declared kind"),
                            }
                        };
                        (pname, kind.to_string())
                    })
                    .collect();
                (name.trim().to_string(), params)
            })
            .collect()
    }

    /// Every kernel in the sources is declared, with its parameters' names, kinds and order, and
    /// every declaration is a kernel of some module.
    #[test]
    fn declarations_match_the_cuda_sources() {
        let mut in_sources = Vec::new();
        for m in modules() {
            in_sources.extend(parse_signatures(m.source));
        }
        for (name, params) in &in_sources {
            let declared =
                DECLARED.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("kernel {name} has no declaration in kernels.rs")).1;
            let declared: Vec<(String, String)> = declared.iter().map(|(p, k)| (p.to_string(), k.to_string())).collect();
            assert_eq!(&declared, params, "kernel {name}: declaration vs C signature");
        }
        for (name, _) in DECLARED {
            assert!(in_sources.iter().any(|(n, _)| n == name), "declared kernel {name} is in no kernels/*.cu");
        }
    }

    /// The parser sees what a mismatch looks like, so the test above cannot pass vacuously.
    #[test]
    fn the_signature_parser_reads_kinds_and_names() {
        let src = "extern \"C\" __global__ void __launch_bounds__(128) k1(const float* x, unsigned long long n,\n float a, int f) {}\n\
                   extern \"C\" __global__ void k2(u64* p) {}";
        let got = parse_signatures(src);
        let want = vec![
            (
                "k1".to_string(),
                vec![("x", "DevPtr"), ("n", "u64"), ("a", "f32"), ("f", "i32")]
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
            ),
            ("k2".to_string(), vec![("p".to_string(), "DevPtr".to_string())]),
        ];
        assert_eq!(got, want);
        assert!(parse_signatures("extern \"C\" __global__ void k(float x) {}") != vec![("k".into(), vec![("x".into(), "u64".into())])]);
    }
}
