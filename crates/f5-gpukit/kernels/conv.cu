// 1-D convolution over the sequence axis of channels-last [batch, n, c_in] activations with a
// PyTorch weight [c_out, c_in/groups, kernel] (stride 1, dilation 1, zero padding `pad`).
// CPU twin: CpuBackend::conv1d (src/cpu/conv.rs).

typedef unsigned long long u64;

#define GRID_STRIDE(i, total) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (total); i += (u64)gridDim.x * blockDim.x)

// Depthwise (groups = c_in = c_out): one thread per output value, consecutive threads on
// consecutive channels so every load is coalesced. Accumulates from the bias in kernel-tap order,
// as the CPU twin does.
extern "C" __global__ void conv1d_depthwise(const float* x, const float* w, const float* bias, float* y, u64 batch,
                                            u64 n, u64 c, u64 kernel, u64 pad, u64 n_out, int has_bias) {
    GRID_STRIDE(i, batch * n_out * c) {
        const u64 ch = i % c;
        const u64 t = (i / c) % n_out;
        const u64 b = i / (c * n_out);
        float acc = has_bias ? bias[ch] : 0.0f;
        const float* xb = x + b * n * c;
        for (u64 k = 0; k < kernel; ++k) {
            const u64 s = t + k;  // source row + pad
            if (s >= pad && s - pad < n) acc += w[ch * kernel + k] * xb[(s - pad) * c + ch];
        }
        y[i] = acc;
    }
}

// Grouped or dense. A block computes CONV_T consecutive output rows × CONV_C consecutive output
// channels of one batch item; the input rows it needs ([CONV_T + kernel − 1] rows of the group's
// c_in/groups channels) are staged through shared memory in channel chunks of CONV_CI, so each
// input value is read from global memory once per block instead of once per output channel.
#define CONV_T 32
#define CONV_C 32
#define CONV_CI 8
#define CONV_MAX_K 64

// Grid: x = output row tiles, y = groups × channel tiles per group, z = batch item. Block (32, 8):
// threadIdx.x picks the output channel, threadIdx.y the rows tl, tl + 8, tl + 16, tl + 24.
// Needs kernel ≤ CONV_MAX_K (the host uses conv1d_direct otherwise).
extern "C" __global__ void conv1d_grouped(const float* x, const float* w, const float* bias, float* y, u64 n,
                                          u64 c_in, u64 c_out, u64 kernel, u64 pad, u64 groups, u64 n_out,
                                          u64 tiles_per_group, int has_bias) {
    __shared__ float xs[CONV_CI][CONV_T + CONV_MAX_K - 1];
    const u64 cin_g = c_in / groups, cout_g = c_out / groups;
    const u64 b = blockIdx.z;
    const u64 t0 = (u64)blockIdx.x * CONV_T;
    const u64 g = blockIdx.y / tiles_per_group;
    const u64 local = (blockIdx.y % tiles_per_group) * CONV_C + threadIdx.x;
    const u64 co = g * cout_g + local;  // this thread's output channel
    const bool live = local < cout_g;
    const u64 tl = threadIdx.y;
    const u64 span = CONV_T + kernel - 1;
    float acc[CONV_T / 8];
#pragma unroll
    for (int r = 0; r < CONV_T / 8; ++r) acc[r] = 0.0f;
    const float* xb = x + b * n * c_in + g * cin_g;
    const unsigned tid = threadIdx.y * blockDim.x + threadIdx.x;
    for (u64 ci0 = 0; ci0 < cin_g; ci0 += CONV_CI) {
        __syncthreads();  // the previous chunk has been consumed
        for (u64 e = tid; e < CONV_CI * span; e += blockDim.x * blockDim.y) {
            // Channel fastest: the CONV_CI values of one input row are contiguous in memory.
            const u64 ci = e % CONV_CI, s = e / CONV_CI;  // staged row s is input row t0 + s − pad
            const u64 src = t0 + s;
            float v = 0.0f;
            if (ci0 + ci < cin_g && src >= pad && src - pad < n) v = xb[(src - pad) * c_in + ci0 + ci];
            xs[ci][s] = v;
        }
        __syncthreads();
        if (live) {
            const u64 cmax = (cin_g - ci0) < CONV_CI ? (cin_g - ci0) : CONV_CI;
            for (u64 ci = 0; ci < cmax; ++ci) {
                const float* wf = w + (co * cin_g + ci0 + ci) * kernel;
                for (u64 k = 0; k < kernel; ++k) {
                    const float wv = wf[k];
#pragma unroll
                    for (int r = 0; r < CONV_T / 8; ++r) acc[r] += wv * xs[ci][tl + 8 * r + k];
                }
            }
        }
    }
    if (live) {
        const float bv = has_bias ? bias[co] : 0.0f;
#pragma unroll
        for (int r = 0; r < CONV_T / 8; ++r) {
            const u64 t = t0 + tl + 8 * r;
            if (t < n_out) y[(b * n_out + t) * c_out + co] = bv + acc[r];
        }
    }
}

// Any shape, one thread per output value: the fallback for kernels wider than CONV_MAX_K.
extern "C" __global__ void conv1d_direct(const float* x, const float* w, const float* bias, float* y, u64 batch,
                                         u64 n, u64 c_in, u64 c_out, u64 kernel, u64 pad, u64 groups, u64 n_out,
                                         int has_bias) {
    const u64 cin_g = c_in / groups, cout_g = c_out / groups;
    GRID_STRIDE(i, batch * n_out * c_out) {
        const u64 co = i % c_out;
        const u64 t = (i / c_out) % n_out;
        const u64 b = i / (c_out * n_out);
        const u64 g = co / cout_g;
        float acc = has_bias ? bias[co] : 0.0f;
        for (u64 ci = 0; ci < cin_g; ++ci) {
            for (u64 k = 0; k < kernel; ++k) {
                const u64 s = t + k;
                if (s >= pad && s - pad < n) acc += w[(co * cin_g + ci) * kernel + k] * x[(b * n + s - pad) * c_in + g * cin_g + ci];
            }
        }
        y[i] = acc;
    }
}
