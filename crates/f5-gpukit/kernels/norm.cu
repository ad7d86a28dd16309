// Row normalisations: LayerNorm (plain or affine) and the fused adaLN modulate, plus GRN.
// CPU twins: CpuBackend::{layer_norm, adaln_modulate, grn} in src/cpu/mod.rs.
//
// Kernels include no header at all, so nvcc and NVRTC (which has no libc headers) compile the
// same source.

#define NORM_THREADS 256

// Sum over the block; every thread gets the result. `scratch` holds one float per warp.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const unsigned warps = (blockDim.x + 31u) >> 5;
    float s = 0.0f;
    for (unsigned w = 0; w < warps; ++w) s += scratch[w];
    return s;
}

// mode 0: (x − mean)·rstd; mode 1: ·w + b; mode 2: ·(1 + scale) + shift.
// Two passes over the row (mean, then Σ(x − mean)²) like the CPU twin: a one-pass E[x²] − E[x]²
// loses the variance of rows with a large common offset.
template <int MODE>
__device__ void norm_row(const float* __restrict__ x, float* __restrict__ out, unsigned long long rows,
                         unsigned long long d, float eps, const float* __restrict__ p0,
                         const float* __restrict__ p1) {
    __shared__ float scratch[32];
    for (unsigned long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * d;
        float* orow = out + r * d;
        float s = 0.0f;
        for (unsigned long long j = threadIdx.x; j < d; j += blockDim.x) s += xr[j];
        const float mean = block_sum(s, scratch) / (float)d;
        float q = 0.0f;
        for (unsigned long long j = threadIdx.x; j < d; j += blockDim.x) {
            const float t = xr[j] - mean;
            q += t * t;
        }
        const float var = block_sum(q, scratch) / (float)d;
        const float rstd = 1.0f / sqrtf(var + eps);
        for (unsigned long long j = threadIdx.x; j < d; j += blockDim.x) {
            const float n = (xr[j] - mean) * rstd;
            float o;
            if (MODE == 0) o = n;
            else if (MODE == 1) o = n * p0[j] + p1[j];
            else o = n * (1.0f + p1[j]) + p0[j];
            orow[j] = o;
        }
    }
}

extern "C" __global__ void layer_norm_plain(const float* x, float* out, unsigned long long rows, unsigned long long d,
                                            float eps) {
    norm_row<0>(x, out, rows, d, eps, nullptr, nullptr);
}

extern "C" __global__ void layer_norm_affine(const float* x, float* out, unsigned long long rows,
                                             unsigned long long d, float eps, const float* w, const float* b) {
    norm_row<1>(x, out, rows, d, eps, w, b);
}

// shift and scale are the d-vectors already offset into the modulation buffer.
extern "C" __global__ void adaln_modulate(const float* x, float* out, unsigned long long rows, unsigned long long d,
                                          float eps, const float* shift, const float* scale) {
    norm_row<2>(x, out, rows, d, eps, shift, scale);
}

// GRN step 1: g[b, c] = sqrt(Σ_t x[b, t, c]²), the L2 norm down the sequence per channel.
// Block (32, 8): 32 channels × 8 row lanes; the 8 partial sums are added in shared memory.
// Grid y strides over the batch items (it holds at most 65,535).
extern "C" __global__ void grn_col_norm(const float* x, float* g, unsigned long long batch, unsigned long long n,
                                        unsigned long long d) {
    __shared__ float part[8][33];
    const unsigned long long c = (unsigned long long)blockIdx.x * 32 + threadIdx.x;
    for (unsigned long long b = blockIdx.y; b < batch; b += gridDim.y) {
        float s = 0.0f;
        if (c < d) {
            const float* xb = x + b * n * d;
            for (unsigned long long t = threadIdx.y; t < n; t += 8) {
                const float v = xb[t * d + c];
                s += v * v;
            }
        }
        part[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && c < d) {
            float tot = 0.0f;
            for (int i = 0; i < 8; ++i) tot += part[i][threadIdx.x];
            g[b * d + c] = sqrtf(tot);
        }
        __syncthreads();  // part is read before the next item overwrites it
    }
}

// GRN step 2, one block per batch item (grid-stride over items): g[b, c] ← g[b, c] / (mean_c g[b, :] + eps).
extern "C" __global__ void grn_factor(float* g, unsigned long long batch, unsigned long long d, float eps) {
    __shared__ float scratch[32];
    for (unsigned long long b = blockIdx.x; b < batch; b += gridDim.x) {
        float* gb = g + b * d;
        float s = 0.0f;
        for (unsigned long long c = threadIdx.x; c < d; c += blockDim.x) s += gb[c];
        const float denom = block_sum(s, scratch) / (float)d + eps;
        __syncthreads();
        for (unsigned long long c = threadIdx.x; c < d; c += blockDim.x) gb[c] = gb[c] / denom;
    }
}

// GRN step 3, in place: x = γ·(x·f) + β + x with f the factor of step 2.
extern "C" __global__ void grn_apply(float* x, const float* f, const float* gamma, const float* beta,
                                     unsigned long long batch, unsigned long long n, unsigned long long d) {
    const unsigned long long total = batch * n * d;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long c = i % d, b = i / (n * d);
        const float v = x[i];
        x[i] = gamma[c] * (v * f[b * d + c]) + beta[c] + v;
    }
}
