//! The CUDA backend: every op of [`Backend`] on one NVIDIA GPU.
//!
//! - Buffers are plain device allocations ([`CudaBuf`]); all work is queued on one stream, so
//!   ops are ordered without events and a `download`/`read` is the only synchronisation.
//! - GEMMs go through cuBLAS (strided-batched, column-major `Cᵀ = Bᵀ·Aᵀ`, see `gemm.rs`), with a
//!   32 MiB workspace so they can also be captured in a CUDA graph. Every other op is a
//!   hand-written kernel in `kernels/*.cu` whose twin is the CPU op of the same name.
//! - Weights uploaded with [`Backend::upload_weight`] can also be kept as bf16
//!   ([`WeightPrecision::Bf16`]); a GEMM with such an operand then runs on the tensor cores
//!   (bf16 inputs, f32 accumulation and output), converting the other operand on the fly.
//! - libcuda, cuBLAS and NVRTC are opened at run time: a binary built with the `cuda` feature runs
//!   anywhere, and [`CudaBackend::new`] reports a missing driver or device as an error.

mod capture;
mod gemm;
mod kernels;
mod modules;
mod seq_ops;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::cublas::result as blas;
use cudarc::cublas::sys as blas_sys;
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig};

pub use modules::KernelSource;

use crate::check;
use crate::spec::{
    AttentionSpec, Conv1dSpec, ConvTranspose1dSpec, GemmSpec, InstanceNormSpec, InterpolateSpec, LstmSpec, Pad1dSpec, RopeSpec, StftSpec,
};
use crate::{shape_err, Activation, Backend, Device, KitError, Result};
use capture::{CaptureGate, GraphPin, Scratch};
use kernels::DevPtr;

/// How [`Backend::upload_weight`] stores weights, and so which GEMMs use the tensor cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightPrecision {
    /// f32 only: every GEMM is an f32 `cublasSgemm` (the CPU twin's numbers up to summation order).
    #[default]
    F32,
    /// Also a bf16 copy: GEMMs with such a weight take bf16 inputs and accumulate in f32
    /// (`cublasGemmEx`, ~2–3 significant digits per product, many times the throughput).
    Bf16,
}

/// Options of [`CudaBackend::with_options`].
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct CudaOptions {
    /// How GEMM weights are kept on the device.
    pub weights: WeightPrecision,
}

impl CudaOptions {
    /// The options a [`crate::DeviceChoice::Cuda`] asks for.
    pub fn with_bf16_weights(bf16: bool) -> Self {
        CudaOptions { weights: if bf16 { WeightPrecision::Bf16 } else { WeightPrecision::F32 } }
    }
}

/// A device buffer of `f32` (and, for weights in bf16 mode, its bf16 copy).
pub struct CudaBuf {
    data: CudaSlice<f32>,
    /// Logical length: a zero-length buffer still holds one device value, since CUDA refuses
    /// empty allocations.
    len: usize,
    bf16: Option<CudaSlice<u16>>,
}

impl CudaBuf {
    /// Whether a bf16 copy exists (weights uploaded in [`WeightPrecision::Bf16`] mode).
    pub fn has_bf16(&self) -> bool {
        self.bf16.is_some()
    }
}

/// cuBLAS workspace: what cuBLAS asks for on Hopper, and what graph capture needs to exist up
/// front (cuBLAS may not allocate during capture).
const BLAS_WORKSPACE_BYTES: usize = 32 << 20;
/// Threads per block of the elementwise and row kernels.
const THREADS: u32 = 256;
/// Grid-stride kernels need no more blocks than this to fill any current GPU.
const MAX_BLOCKS: usize = 1 << 16;

/// A size as a kernel's `u64` parameter.
fn u(v: usize) -> u64 {
    v as u64
}

/// The grid of a grid-stride kernel over `total` values, or `None` (launch nothing) for 0.
fn each(total: usize) -> Option<LaunchConfig> {
    (total > 0).then(|| grid_1d(total))
}

fn dev_err(what: impl std::fmt::Display) -> impl FnOnce(cudarc::driver::DriverError) -> KitError {
    move |e| KitError::Device(format!("{what}: {e}"))
}

fn blas_err(what: &'static str) -> impl FnOnce(blas::CublasError) -> KitError {
    move |e| KitError::Device(format!("cuBLAS {what}: {e:?}"))
}

fn grid_1d(total: usize) -> LaunchConfig {
    let blocks = total.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

fn grid_dim(op: &'static str, what: &str, v: usize, max: usize) -> Result<u32> {
    if v > max {
        return Err(shape_err(op, format!("{what} = {v} exceeds the CUDA grid limit {max}")));
    }
    Ok(v as u32)
}

/// The CUDA backend on one device. `Send + Sync`; ops from several threads are queued on the
/// same stream in call order. Cloning is cheap and shares the device state (the model and the
/// vocoder of one pipeline each hold a handle, as with the CPU backend's thread pool).
#[derive(Clone)]
pub struct CudaBackend {
    state: Arc<CudaState>,
}

impl std::ops::Deref for CudaBackend {
    type Target = CudaState;
    fn deref(&self) -> &CudaState {
        &self.state
    }
}

/// What every handle of one [`CudaBackend`] shares.
pub struct CudaState {
    // Field order is drop order: functions and cuBLAS go before the memory and the stream they use.
    kernels: HashMap<&'static str, CudaFunction>,
    kernel_source: KernelSource,
    blas: CudaBlas,
    _workspace: CudaSlice<u8>,
    /// bf16 staging of the operand that has no bf16 copy. Reused by every bf16 GEMM: stream
    /// order makes that safe; growing it frees the old one stream-ordered, or keeps it while a
    /// captured graph may still point into it (see `capture.rs`).
    bf16_scratch: Mutex<Scratch<CudaSlice<u16>>>,
    /// GRN's per-(item, channel) norms, reused like `bf16_scratch` so GRN can be captured.
    grn_scratch: Mutex<Scratch<CudaSlice<f32>>>,
    /// Serialises graph capture against other threads' ops and pins scratch for live graphs.
    gate: CaptureGate,
    options: CudaOptions,
    ordinal: usize,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

impl CudaBackend {
    /// Opens device `ordinal` with default options (f32 weights).
    pub fn new(ordinal: usize) -> Result<Self> {
        Self::with_options(ordinal, CudaOptions::default())
    }

    /// Opens device `ordinal`. Fails with [`KitError::Device`] — never panics — when the driver
    /// library, cuBLAS or the device is missing, or a kernel module cannot be loaded.
    pub fn with_options(ordinal: usize, options: CudaOptions) -> Result<Self> {
        // cudarc panics on the first call into a library it cannot dlopen; probe first.
        // SAFETY: these only try to open the shared libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(KitError::Device("no CUDA driver: libcuda.so could not be loaded".into()));
        }
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(KitError::Device("cuBLAS not found: libcublas.so.13 could not be loaded (set LD_LIBRARY_PATH)".into()));
        }
        // A driver too old for a symbol cudarc needs also panics (missing symbol): contain it.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Self::open(ordinal, options))) {
            Ok(r) => r,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown panic");
                Err(KitError::Device(format!("CUDA initialisation failed: {msg}")))
            }
        }
    }

    fn open(ordinal: usize, options: CudaOptions) -> Result<Self> {
        let count = CudaContext::device_count().map_err(dev_err("cannot initialise the CUDA driver"))?;
        if count <= 0 {
            return Err(KitError::Device("the CUDA driver reports no device".into()));
        }
        if ordinal >= count as usize {
            return Err(KitError::Device(format!("no CUDA device {ordinal}: the driver reports {count}")));
        }
        let ctx = CudaContext::new(ordinal).map_err(dev_err(format!("cannot open CUDA device {ordinal}")))?;
        // One stream orders everything: per-buffer events would only add work to every launch.
        // SAFETY: called before any allocation, as cudarc requires.
        unsafe { ctx.disable_event_tracking() };
        // A created stream (not the legacy default one) so that the work can be graph-captured.
        let stream = ctx.new_stream().map_err(dev_err("cannot create a CUDA stream"))?;
        let (kernels, kernel_source) = modules::load_all(&ctx)?;
        let blas = CudaBlas::new(stream.clone()).map_err(blas_err("handle creation"))?;
        // SAFETY: allocation of raw bytes that only cuBLAS uses.
        let workspace = unsafe { stream.alloc::<u8>(BLAS_WORKSPACE_BYTES) }.map_err(dev_err("cannot allocate the cuBLAS workspace"))?;
        let (ws_ptr, _) = workspace.device_ptr(&stream);
        // SAFETY: the workspace outlives the handle (field order) and is used by no one else.
        unsafe { blas_sys::cublasSetWorkspace_v2(*blas.handle(), ws_ptr as *mut std::ffi::c_void, BLAS_WORKSPACE_BYTES) }
            .result()
            .map_err(blas_err("set workspace"))?;
        Ok(CudaBackend {
            state: Arc::new(CudaState {
                kernels,
                kernel_source,
                blas,
                _workspace: workspace,
                bf16_scratch: Mutex::new(Scratch::new("the bf16 GEMM operand scratch")),
                grn_scratch: Mutex::new(Scratch::new("the GRN norm scratch")),
                gate: CaptureGate::default(),
                options,
                ordinal,
                stream,
                ctx,
            }),
        })
    }

    /// The options this backend was opened with.
    pub fn options(&self) -> CudaOptions {
        self.options
    }

    /// Where the kernels came from (build-time PTX, NVRTC, `KIT_PTX_DIR`).
    pub fn kernel_source(&self) -> KernelSource {
        self.kernel_source
    }

    /// The device's name as the driver reports it.
    pub fn name(&self) -> Result<String> {
        self.ctx.name().map_err(dev_err("device name"))
    }

    /// `(free, total)` device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize)> {
        self.ctx.mem_get_info().map_err(dev_err("memory info"))
    }

    /// Waits for every queued op; surfaces any asynchronous kernel error.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(dev_err("stream synchronize"))
    }

    /// Milliseconds of device time the ops queued by `work` take (CUDA events around it).
    pub fn time_ms(&self, work: impl FnOnce() -> Result<()>) -> Result<f32> {
        use cudarc::driver::sys::CUevent_flags;
        let start = self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(dev_err("event"))?;
        let end = self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(dev_err("event"))?;
        start.record(&self.stream).map_err(dev_err("event record"))?;
        work()?;
        end.record(&self.stream).map_err(dev_err("event record"))?;
        end.synchronize().map_err(dev_err("event synchronize"))?;
        start.elapsed_ms(&end).map_err(dev_err("event elapsed"))
    }

    /// Records the ops queued by `work` into a CUDA graph instead of running them.
    ///
    /// `work` must not allocate, upload or download: run it once eagerly first so scratch
    /// buffers exist. Ops that cannot be recorded (the LSTM and the embedding copy host data;
    /// a scratch buffer that would have to grow) fail the capture with an error saying so.
    /// While the capture runs, ops from other threads wait for it to end (stream capture would
    /// otherwise record them too); the scratch a graph recorded stays allocated as long as the
    /// graph exists.
    pub fn capture(&self, work: impl FnOnce() -> Result<()>) -> Result<CudaGraph> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        let capture = self.gate.begin()?;
        self.stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(dev_err("begin graph capture"))?;
        let queued = work();
        // End the capture whatever happened, so the stream is usable again.
        let graph = self.stream.end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
        queued?;
        let graph = graph.map_err(dev_err("end graph capture"))?;
        let graph = graph.ok_or_else(|| KitError::Device("graph capture recorded nothing".into()))?;
        Ok(CudaGraph { graph, _pin: capture.into_pin() })
    }

    /// Refuses, inside a capture, an op that cannot be recorded into a graph.
    fn refuse_in_capture(&self, op: &str, why: &str) -> Result<()> {
        self.gate.refuse(op, why)
    }

    fn kernel(&self, name: &'static str) -> Result<&CudaFunction> {
        self.kernels.get(name).ok_or_else(|| KitError::Device(format!("kernel {name} is not loaded")))
    }

    /// Device address of `buf[offset]` as a kernel argument.
    fn at(&self, buf: &CudaBuf, offset: usize) -> DevPtr {
        DevPtr(self.addr(&buf.data, offset, 4))
    }

    fn addr<T>(&self, s: &CudaSlice<T>, offset: usize, elem: u64) -> u64 {
        let (p, _no_event) = s.device_ptr(&self.stream);
        p + offset as u64 * elem
    }

    /// Converts `src[offset..offset + len]` to bf16 in `dst[..len]`.
    fn to_bf16(&self, src: &CudaSlice<f32>, offset: usize, dst: &CudaSlice<u16>, len: usize) -> Result<()> {
        self.k().f32_to_bf16(each(len), DevPtr(self.addr(src, offset, 4)), DevPtr(self.addr(dst, 0, 2)), u(len))
    }

    fn device_alloc<T: cudarc::driver::DeviceRepr>(&self, len: usize, what: &str) -> Result<CudaSlice<T>> {
        self.refuse_in_capture("an allocation", "allocates device memory (run the work once eagerly before capturing)")?;
        let _op = self.gate.enter()?;
        // SAFETY: every caller writes the buffer before any kernel reads it.
        unsafe { self.stream.alloc::<T>(len.max(1)) }.map_err(dev_err(format!("cannot allocate {len} values for {what}")))
    }

    fn gemm_f32(&self, call: &gemm::BlasCall, a: &CudaBuf, b: &CudaBuf, c: &mut CudaBuf, beta: f32) -> Result<()> {
        // cuBLAS's A is our B, its B our A (Cᵀ = Bᵀ·Aᵀ).
        let alpha = 1.0f32;
        let pa = self.addr(&b.data, call.a.offset, 4) as *const f32;
        let pb = self.addr(&a.data, call.b.offset, 4) as *const f32;
        let pc = self.addr(&c.data, call.c.offset, 4) as *mut f32;
        let _op = self.gate.enter()?;
        self.ctx.bind_to_thread().map_err(dev_err("bind context"))?;
        // SAFETY: GemmSpec::validate bounded every element the call touches inside its buffer.
        unsafe {
            blas::sgemm_strided_batched(
                *self.blas.handle(),
                op(call.a.op),
                op(call.b.op),
                call.m,
                call.n,
                call.k,
                &alpha,
                pa,
                call.a.ld,
                call.a.batch_stride,
                pb,
                call.b.ld,
                call.b.batch_stride,
                &beta,
                pc,
                call.c.ld,
                call.c.batch_stride,
                call.batch,
            )
        }
        .map_err(blas_err("sgemm_strided_batched"))
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm_bf16(&self, spec: &GemmSpec, call: &gemm::BlasCall, a: &CudaBuf, b: &CudaBuf, c: &mut CudaBuf, beta: f32) -> Result<()> {
        // Operand pointers in bf16: the stored copy, or the f32 span converted into scratch.
        let mut scratch = self.bf16_scratch.lock().map_err(|_| KitError::Device("bf16 scratch lock poisoned".into()))?;
        let mut pointer = |buf: &CudaBuf, layout: &crate::MatLayout, rows: usize, cols: usize, offset: usize| -> Result<u64> {
            if let Some(copy) = &buf.bf16 {
                return Ok(self.addr(copy, offset, 2));
            }
            let end = layout.extent(rows, cols, spec.batch).unwrap_or(layout.offset);
            let span = end.saturating_sub(layout.offset);
            let s = scratch.ensure(&self.gate, span, |s| s.len(), |len| self.device_alloc::<u16>(len, "the bf16 GEMM operand"))?;
            self.to_bf16(&buf.data, layout.offset, s, span)?;
            Ok(self.addr(s, offset - layout.offset, 2))
        };
        // Only one operand can lack a copy (the caller checked one has it), so scratch is free.
        let pa = pointer(b, &spec.b, spec.k, spec.n, call.a.offset)?;
        let pb = pointer(a, &spec.a, spec.m, spec.k, call.b.offset)?;
        let pc = self.addr(&c.data, call.c.offset, 4);
        let alpha = 1.0f32;
        let _op = self.gate.enter()?;
        self.ctx.bind_to_thread().map_err(dev_err("bind context"))?;
        use blas_sys::{cublasComputeType_t, cublasGemmAlgo_t, cudaDataType};
        // SAFETY: as in gemm_f32; bf16 operands mirror the validated f32 spans element for element.
        unsafe {
            blas::gemm_strided_batched_ex(
                *self.blas.handle(),
                op(call.a.op),
                op(call.b.op),
                call.m,
                call.n,
                call.k,
                (&alpha as *const f32).cast(),
                pa as *const std::ffi::c_void,
                cudaDataType::CUDA_R_16BF,
                call.a.ld,
                call.a.batch_stride,
                pb as *const std::ffi::c_void,
                cudaDataType::CUDA_R_16BF,
                call.b.ld,
                call.b.batch_stride,
                (&beta as *const f32).cast(),
                pc as *mut std::ffi::c_void,
                cudaDataType::CUDA_R_32F,
                call.c.ld,
                call.c.batch_stride,
                call.batch,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(blas_err("gemm_strided_batched_ex (bf16)"))
    }

    /// One block per row (grid-stride over rows) for the row-normalisation kernels.
    fn norm_rows(rows: usize) -> LaunchConfig {
        let blocks = rows.clamp(1, MAX_BLOCKS) as u32;
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
    }
}

fn op(o: gemm::Op) -> blas_sys::cublasOperation_t {
    match o {
        gemm::Op::N => blas_sys::cublasOperation_t::CUBLAS_OP_N,
        gemm::Op::T => blas_sys::cublasOperation_t::CUBLAS_OP_T,
    }
}

/// A captured sequence of ops; [`CudaGraph::replay`] queues it again with one launch.
pub struct CudaGraph {
    // Field order is drop order: the graph goes before its pin on the scratch buffers.
    graph: cudarc::driver::CudaGraph,
    _pin: GraphPin,
}

impl CudaGraph {
    /// Runs the captured work again on the backend's stream, with one launch.
    pub fn replay(&self) -> Result<()> {
        // A replay is plain stream work: it needs no gate (it records nothing).
        self.graph.launch().map_err(dev_err("graph launch"))
    }
}

impl Backend for CudaBackend {
    type Buf = CudaBuf;

    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    fn alloc(&self, len: usize) -> Result<CudaBuf> {
        self.refuse_in_capture("alloc", "allocates device memory (allocate before capturing)")?;
        let _op = self.gate.enter()?;
        let data = self.stream.alloc_zeros::<f32>(len.max(1)).map_err(|_| KitError::OutOfMemory(len))?;
        Ok(CudaBuf { data, len, bf16: None })
    }

    fn upload(&self, data: &[f32]) -> Result<CudaBuf> {
        self.refuse_in_capture("upload", "allocates and copies from host memory")?;
        let mut buf = CudaBuf {
            data: self.device_alloc::<f32>(data.len(), "an upload").map_err(|_| KitError::OutOfMemory(data.len()))?,
            len: data.len(),
            bf16: None,
        };
        if !data.is_empty() {
            let _op = self.gate.enter()?;
            self.stream.memcpy_htod(data, &mut buf.data).map_err(dev_err("upload"))?;
        }
        Ok(buf)
    }

    fn upload_weight(&self, data: &[f32]) -> Result<CudaBuf> {
        let mut buf = self.upload(data)?;
        if self.options.weights == WeightPrecision::Bf16 {
            let copy = self.device_alloc::<u16>(data.len(), "a bf16 weight")?;
            self.to_bf16(&buf.data, 0, &copy, data.len())?;
            buf.bf16 = Some(copy);
        }
        Ok(buf)
    }

    fn download(&self, buf: &CudaBuf) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        out.try_reserve_exact(buf.len).map_err(|_| KitError::OutOfMemory(buf.len))?;
        out.resize(buf.len, 0.0);
        self.read(buf, 0, &mut out)?;
        Ok(out)
    }

    fn len(&self, buf: &CudaBuf) -> usize {
        buf.len
    }

    fn write(&self, buf: &mut CudaBuf, offset: usize, data: &[f32]) -> Result<()> {
        let end = offset.checked_add(data.len()).filter(|&e| e <= buf.len);
        let end = end.ok_or_else(|| shape_err("write", format!("{}+{} past buffer of {}", offset, data.len(), buf.len)))?;
        if data.is_empty() {
            return Ok(());
        }
        self.refuse_in_capture("write", "copies from host memory")?;
        let _op = self.gate.enter()?;
        let mut dst = buf.data.slice_mut(offset..end);
        self.stream.memcpy_htod(data, &mut dst).map_err(dev_err("write"))?;
        // A later bf16 GEMM must not see a stale copy.
        if let Some(copy) = &buf.bf16 {
            self.k().f32_to_bf16(
                each(data.len()),
                DevPtr(self.addr(&buf.data, offset, 4)),
                DevPtr(self.addr(copy, offset, 2)),
                u(data.len()),
            )?;
        }
        Ok(())
    }

    fn read(&self, buf: &CudaBuf, offset: usize, out: &mut [f32]) -> Result<()> {
        let end = offset.checked_add(out.len()).filter(|&e| e <= buf.len);
        let end = end.ok_or_else(|| shape_err("read", format!("{}+{} past buffer of {}", offset, out.len(), buf.len)))?;
        if out.is_empty() {
            return Ok(());
        }
        self.refuse_in_capture("read", "copies to host memory and waits for the device")?;
        let _op = self.gate.enter()?;
        let src = buf.data.slice(offset..end);
        self.stream.memcpy_dtoh(&src, out).map_err(dev_err("read"))?;
        self.synchronize()
    }

    fn copy(&self, src: &CudaBuf, src_off: usize, dst: &mut CudaBuf, dst_off: usize, len: usize) -> Result<()> {
        let s_end = src_off.checked_add(len).filter(|&e| e <= src.len);
        let d_end = dst_off.checked_add(len).filter(|&e| e <= dst.len);
        let (Some(se), Some(de)) = (s_end, d_end) else {
            return Err(shape_err("copy", format!("{len} values from {src_off} (of {}) to {dst_off} (of {})", src.len, dst.len)));
        };
        if len == 0 {
            return Ok(());
        }
        let _op = self.gate.enter()?;
        let from = src.data.slice(src_off..se);
        let mut to = dst.data.slice_mut(dst_off..de);
        self.stream.memcpy_dtod(&from, &mut to).map_err(dev_err("copy"))?;
        if let Some(copy) = &dst.bf16 {
            self.k().f32_to_bf16(each(len), DevPtr(self.addr(&dst.data, dst_off, 4)), DevPtr(self.addr(copy, dst_off, 2)), u(len))?;
        }
        Ok(())
    }

    fn fill(&self, buf: &mut CudaBuf, offset: usize, len: usize, value: f32) -> Result<()> {
        let end = offset.checked_add(len).filter(|&e| e <= buf.len);
        end.ok_or_else(|| shape_err("fill", format!("{offset}+{len} past buffer of {}", buf.len)))?;
        self.k().fill_f32(each(len), self.at(buf, offset), u(len), value)?;
        if let Some(copy) = &buf.bf16 {
            self.k().f32_to_bf16(each(len), DevPtr(self.addr(&buf.data, offset, 4)), DevPtr(self.addr(copy, offset, 2)), u(len))?;
        }
        Ok(())
    }

    fn gemm(&self, spec: &GemmSpec, a: &CudaBuf, b: &CudaBuf, bias: Option<&CudaBuf>, c: &mut CudaBuf) -> Result<()> {
        spec.validate(a.len, b.len, c.len, bias.map(|b| b.len))?;
        if spec.batch == 0 || spec.m == 0 || spec.n == 0 {
            return Ok(());
        }
        let _op = self.gate.enter()?;
        let total = crate::spec::product("gemm", &[spec.batch, spec.m, spec.n])?;
        if spec.k == 0 {
            // A·B is a sum of no terms: C = beta·C (+ bias), as on the CPU. cuBLAS is not asked,
            // since a k = 0 operand has no valid leading dimension to describe it.
            if spec.beta == 0.0 {
                self.k().zero_rows(
                    each(total),
                    self.at(c, spec.c.offset),
                    u(spec.batch),
                    u(spec.m),
                    u(spec.n),
                    u(spec.c.row_stride),
                    u(spec.c.batch_stride),
                )?;
            }
        } else {
            let call = gemm::blas_call(spec)?;
            if a.bf16.is_some() || b.bf16.is_some() {
                self.gemm_bf16(spec, &call, a, b, c, spec.beta)?;
            } else {
                self.gemm_f32(&call, a, b, c, spec.beta)?;
            }
        }
        if let Some(bias) = bias {
            self.k().add_bias_rows(
                each(total),
                self.at(c, spec.c.offset),
                self.at(bias, 0),
                u(spec.batch),
                u(spec.m),
                u(spec.n),
                u(spec.c.row_stride),
                u(spec.c.batch_stride),
            )?;
        }
        Ok(())
    }

    fn attention(&self, spec: &AttentionSpec, q: &CudaBuf, k: &CudaBuf, v: &CudaBuf, out: &mut CudaBuf) -> Result<()> {
        spec.validate(q.len, k.len, v.len, out.len)?;
        let AttentionSpec { batch_heads, n, head_dim: d, scale } = *spec;
        if batch_heads == 0 || n == 0 || d == 0 {
            return Ok(());
        }
        const ROWS_PER_BLOCK: usize = 128;
        // Slices fill grid y (at most 65,535) and overflow into grid z.
        let grid_y = batch_heads.min(65_535);
        let cfg = LaunchConfig {
            grid_dim: (
                grid_dim("attention", "query blocks", n.div_ceil(ROWS_PER_BLOCK), i32::MAX as usize)?,
                grid_y as u32,
                grid_dim("attention", "batch·heads / 65,535", batch_heads.div_ceil(grid_y), 65_535)?,
            ),
            block_dim: (ROWS_PER_BLOCK as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (pq, pk, pv, po) = (self.at(q, 0), self.at(k, 0), self.at(v, 0), self.at(out, 0));
        match d {
            64 => self.k().attention_d64(cfg, pq, pk, pv, po, u(batch_heads), u(n), scale),
            1..=32 => self.k().attention_le32(cfg, pq, pk, pv, po, u(batch_heads), u(n), u(d), scale),
            33..=64 => self.k().attention_le64(cfg, pq, pk, pv, po, u(batch_heads), u(n), u(d), scale),
            _ => Err(shape_err("attention", format!("head_dim {d} > 64 is not supported by the CUDA kernel"))),
        }
    }

    fn layer_norm(
        &self,
        x: &CudaBuf,
        rows: usize,
        d: usize,
        eps: f32,
        affine: Option<(&CudaBuf, &CudaBuf)>,
        out: &mut CudaBuf,
    ) -> Result<()> {
        let total = check::layer_norm(rows, d, x.len, out.len, affine.map(|(w, b)| (w.len, b.len)))?;
        if total == 0 {
            return Ok(());
        }
        let cfg = Self::norm_rows(rows);
        match affine {
            Some((w, b)) => {
                self.k().layer_norm_affine(cfg, self.at(x, 0), self.at(out, 0), u(rows), u(d), eps, self.at(w, 0), self.at(b, 0))
            }
            None => self.k().layer_norm_plain(cfg, self.at(x, 0), self.at(out, 0), u(rows), u(d), eps),
        }
    }

    fn adaln_modulate(
        &self,
        x: &CudaBuf,
        rows: usize,
        d: usize,
        eps: f32,
        modulation: &CudaBuf,
        shift_off: usize,
        scale_off: usize,
        out: &mut CudaBuf,
    ) -> Result<()> {
        let total = check::adaln_modulate(rows, d, x.len, out.len, modulation.len, shift_off, scale_off)?;
        if total == 0 {
            return Ok(());
        }
        let (shift, scale) = (self.at(modulation, shift_off), self.at(modulation, scale_off));
        self.k().adaln_modulate(Self::norm_rows(rows), self.at(x, 0), self.at(out, 0), u(rows), u(d), eps, shift, scale)
    }

    fn gated_add(&self, x: &mut CudaBuf, y: &CudaBuf, rows: usize, d: usize, gates: &CudaBuf, gate_off: usize) -> Result<()> {
        let total = check::gated_add(rows, d, x.len, y.len, gates.len, gate_off)?;
        self.k().gated_add(each(total), self.at(x, 0), self.at(y, 0), self.at(gates, gate_off), u(total), u(d))
    }

    fn grn(&self, x: &mut CudaBuf, batch: usize, n: usize, d: usize, gamma: &CudaBuf, beta: &CudaBuf, eps: f32) -> Result<()> {
        let op = "grn";
        let total = check::grn(batch, n, d, x.len, gamma.len, beta.len)?;
        if total == 0 {
            return Ok(());
        }
        let _op = self.gate.enter()?;
        let mut scratch = self.grn_scratch.lock().map_err(|_| KitError::Device("GRN scratch lock poisoned".into()))?;
        let need = crate::spec::product(op, &[batch, d])?;
        let g = scratch.ensure(&self.gate, need, |s| s.len(), |len| self.device_alloc::<f32>(len, "GRN norms"))?;
        let pg = DevPtr(self.addr(g, 0, 4));
        let cfg = LaunchConfig {
            // Items beyond the grid's y limit are looped over inside the kernel.
            grid_dim: (grid_dim(op, "channel blocks", d.div_ceil(32), i32::MAX as usize)?, batch.min(65_535) as u32, 1),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        self.k().grn_col_norm(cfg, self.at(x, 0), DevPtr(self.addr(g, 0, 4)), u(batch), u(n), u(d))?;
        let cfg = LaunchConfig { grid_dim: (batch.min(MAX_BLOCKS) as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        self.k().grn_factor(cfg, DevPtr(self.addr(g, 0, 4)), u(batch), u(d), eps)?;
        self.k().grn_apply(each(total), self.at(x, 0), pg, self.at(gamma, 0), self.at(beta, 0), u(batch), u(n), u(d))
    }

    fn split_heads_rope(&self, spec: &RopeSpec, src: &CudaBuf, cos: &CudaBuf, sin: &CudaBuf, dst: &mut CudaBuf) -> Result<()> {
        spec.validate(src.len, cos.len, sin.len, dst.len)?;
        let RopeSpec { batch, n, heads, head_dim: hd, rope_heads, src: rows } = *spec;
        let pairs = batch * n * heads * (hd / 2);
        self.k().split_heads_rope(
            each(pairs),
            self.at(src, 0),
            self.at(cos, 0),
            self.at(sin, 0),
            self.at(dst, 0),
            u(batch),
            u(n),
            u(heads),
            u(hd),
            u(rope_heads),
            u(rows.offset),
            u(rows.row_stride),
        )
    }

    fn merge_heads(&self, src: &CudaBuf, batch: usize, n: usize, heads: usize, hd: usize, dst: &mut CudaBuf) -> Result<()> {
        let total = check::merge_heads(batch, n, heads, hd, src.len, dst.len)?;
        self.k().merge_heads(each(total), self.at(src, 0), self.at(dst, 0), u(batch), u(n), u(heads), u(hd))
    }

    fn conv1d(&self, spec: &Conv1dSpec, x: &CudaBuf, weight: &CudaBuf, bias: Option<&CudaBuf>, y: &mut CudaBuf) -> Result<()> {
        spec.validate(x.len, weight.len, bias.map(|b| b.len), y.len)?;
        if spec.stride != 1 || spec.dilation != 1 || spec.pad_mode != crate::PadMode::Zeros {
            return seq_ops::conv1d_general(self, spec, x, weight, bias, y);
        }
        let Conv1dSpec { batch, n, c_in, c_out, kernel, pad, groups, .. } = *spec;
        let n_out = spec.n_out();
        if batch == 0 || n_out == 0 || c_out == 0 {
            return Ok(());
        }
        let (pb, has_bias) = match bias {
            Some(b) => (self.at(b, 0), 1),
            None => (DevPtr::NULL, 0),
        };
        let (px, pw, py) = (self.at(x, 0), self.at(weight, 0), self.at(y, 0));
        let total = batch * n_out * c_out;
        if groups == c_in && c_out == c_in {
            return self.k().conv1d_depthwise(each(total), px, pw, pb, py, u(batch), u(n), u(c_in), u(kernel), u(pad), u(n_out), has_bias);
        }
        // The tiled kernel stages kernel + 31 input rows per block (see kernels/conv.cu).
        const TILE: usize = 32;
        const MAX_KERNEL: usize = 64;
        let cout_g = c_out / groups;
        let tiles_per_group = cout_g.div_ceil(TILE);
        let grid_y = groups.saturating_mul(tiles_per_group);
        if kernel <= MAX_KERNEL && grid_y <= 65_535 && batch <= 65_535 && n_out.div_ceil(TILE) <= i32::MAX as usize {
            let cfg = LaunchConfig {
                grid_dim: (n_out.div_ceil(TILE) as u32, grid_y as u32, batch as u32),
                block_dim: (32, 8, 1),
                shared_mem_bytes: 0,
            };
            return self.k().conv1d_grouped(
                cfg,
                px,
                pw,
                pb,
                py,
                u(n),
                u(c_in),
                u(c_out),
                u(kernel),
                u(pad),
                u(groups),
                u(n_out),
                u(tiles_per_group),
                has_bias,
            );
        }
        self.k().conv1d_direct(
            each(total),
            px,
            pw,
            pb,
            py,
            u(batch),
            u(n),
            u(c_in),
            u(c_out),
            u(kernel),
            u(pad),
            u(groups),
            u(n_out),
            has_bias,
        )
    }

    fn activation(&self, act: Activation, x: &mut CudaBuf, len: usize) -> Result<()> {
        check::elementwise("activation", len, x.len)?;
        let (k, px) = (self.k(), self.at(x, 0));
        match act {
            Activation::GeluErf => k.gelu_erf(each(len), px, u(len)),
            Activation::GeluTanh => k.gelu_tanh(each(len), px, u(len)),
            Activation::Silu => k.silu(each(len), px, u(len)),
            Activation::Mish => k.mish(each(len), px, u(len)),
            other => seq_ops::activation(self, other, x, len),
        }
    }

    fn cfg_combine(&self, pred: &CudaBuf, half: usize, strength: f32, out: &mut CudaBuf) -> Result<()> {
        check::cfg_combine(half, pred.len, out.len)?;
        self.k().cfg_combine(each(half), self.at(pred, 0), self.at(out, 0), u(half), strength)
    }

    fn axpy(&self, a: f32, x: &CudaBuf, y: &mut CudaBuf, len: usize) -> Result<()> {
        check::axpy(len, x.len, y.len)?;
        self.k().axpy(each(len), a, self.at(x, 0), self.at(y, 0), u(len))
    }

    fn mask_rows(&self, x: &mut CudaBuf, rows: usize, d: usize, keep: &CudaBuf) -> Result<()> {
        let total = check::mask_rows(rows, d, x.len, keep.len)?;
        self.k().mask_rows(each(total), self.at(x, 0), self.at(keep, 0), u(total), u(d))
    }

    fn concat_features(&self, parts: &[(&CudaBuf, usize)], rows: usize, out: &mut CudaBuf) -> Result<()> {
        let lens: Vec<(usize, usize)> = parts.iter().map(|(p, w)| (p.len, *w)).collect();
        let width = check::concat_features(&lens, rows, out.len)?;
        let mut at = 0;
        for (p, w) in parts {
            self.k().copy_rows(each(rows * w), self.at(p, 0), u(*w), self.at(out, at), u(width), u(rows), u(*w))?;
            at += w;
        }
        Ok(())
    }

    fn split_features(&self, x: &CudaBuf, rows: usize, parts: &mut [(&mut CudaBuf, usize)]) -> Result<()> {
        let lens: Vec<(usize, usize)> = parts.iter().map(|(p, w)| (p.len, *w)).collect();
        let width = check::split_features(x.len, rows, &lens)?;
        let mut at = 0;
        for (p, w) in parts.iter_mut() {
            self.k().copy_rows(each(rows * *w), self.at(x, at), u(width), self.at(p, 0), u(*w), u(rows), u(*w))?;
            at += *w;
        }
        Ok(())
    }

    fn embedding(&self, table: &CudaBuf, dim: usize, ids: &[u32], out: &mut CudaBuf) -> Result<()> {
        check::embedding(table.len, dim, ids, out.len)?;
        if ids.is_empty() || dim == 0 {
            return Ok(());
        }
        self.refuse_in_capture("embedding", "copies the ids from host memory")?;
        let _op = self.gate.enter()?;
        let mut dev_ids = self.device_alloc::<u32>(ids.len(), "embedding ids")?;
        self.stream.memcpy_htod(ids, &mut dev_ids).map_err(dev_err("embedding ids upload"))?;
        self.k().embedding(
            each(ids.len() * dim),
            self.at(table, 0),
            DevPtr(self.addr(&dev_ids, 0, 4)),
            self.at(out, 0),
            u(ids.len()),
            u(dim),
        )
    }

    fn polar_spectrum(&self, h: &CudaBuf, frames: usize, bins: usize, mag_max: f32, re: &mut CudaBuf, im: &mut CudaBuf) -> Result<()> {
        let half = check::polar_spectrum(frames, bins, h.len, re.len, im.len)?;
        self.k().polar_spectrum(each(half), self.at(h, 0), self.at(re, 0), self.at(im, 0), u(frames), u(bins), mag_max)
    }

    fn conv_transpose1d(
        &self,
        spec: &ConvTranspose1dSpec,
        x: &CudaBuf,
        weight: &CudaBuf,
        bias: Option<&CudaBuf>,
        y: &mut CudaBuf,
    ) -> Result<()> {
        spec.validate(x.len, weight.len, bias.map(|b| b.len), y.len)?;
        seq_ops::conv_transpose1d(self, spec, x, weight, bias, y)
    }

    fn lstm(
        &self,
        spec: &LstmSpec,
        lengths: &[usize],
        gates_x: &CudaBuf,
        w_hh: &CudaBuf,
        state0: Option<(&CudaBuf, &CudaBuf)>,
        out: &mut CudaBuf,
    ) -> Result<()> {
        spec.validate(lengths, gates_x.len, w_hh.len, state0.map(|(h, c)| (h.len, c.len)), out.len)?;
        seq_ops::lstm(self, spec, lengths, gates_x, w_hh, state0, out)
    }

    fn instance_norm(
        &self,
        spec: &InstanceNormSpec,
        x: &CudaBuf,
        affine: Option<(&CudaBuf, &CudaBuf)>,
        style: Option<&CudaBuf>,
        out: &mut CudaBuf,
    ) -> Result<()> {
        spec.validate(x.len, affine.map(|(w, b)| (w.len, b.len)), style.map(|s| s.len), out.len)?;
        seq_ops::instance_norm(self, spec, x, affine, style, out)
    }

    fn snake(&self, x: &mut CudaBuf, rows: usize, c: usize, alpha: &CudaBuf) -> Result<()> {
        let total = check::snake(rows, c, x.len, alpha.len)?;
        seq_ops::snake(self, x, total, c, alpha)
    }

    fn upsample_nearest(&self, x: &CudaBuf, batch: usize, n: usize, c: usize, factor: usize, out: &mut CudaBuf) -> Result<()> {
        let total = check::upsample_nearest(batch, n, c, factor, x.len, out.len)?;
        seq_ops::upsample_nearest(self, x, total, n, c, factor, out)
    }

    fn interpolate_linear(&self, spec: &InterpolateSpec, x: &CudaBuf, out: &mut CudaBuf) -> Result<()> {
        spec.validate(x.len, out.len)?;
        seq_ops::interpolate_linear(self, spec, x, out)
    }

    fn pad1d(&self, spec: &Pad1dSpec, x: &CudaBuf, out: &mut CudaBuf) -> Result<()> {
        spec.validate(x.len, out.len)?;
        seq_ops::pad1d(self, spec, x, out)
    }

    fn cumsum(&self, x: &CudaBuf, batch: usize, n: usize, c: usize, out: &mut CudaBuf) -> Result<()> {
        check::cumsum(batch, n, c, x.len, out.len)?;
        seq_ops::cumsum(self, x, batch, n, c, out)
    }

    fn stft(&self, spec: &StftSpec, signal: &CudaBuf, mag: &mut CudaBuf, phase: &mut CudaBuf) -> Result<()> {
        spec.validate("stft", signal.len, mag.len, phase.len)?;
        seq_ops::stft(self, spec, signal, mag, phase)
    }

    fn istft(&self, spec: &StftSpec, mag: &CudaBuf, phase: &CudaBuf, signal: &mut CudaBuf) -> Result<()> {
        spec.validate("istft", signal.len, mag.len, phase.len)?;
        seq_ops::istft(self, spec, mag, phase, signal)
    }
}

#[cfg(test)]
mod tests;
