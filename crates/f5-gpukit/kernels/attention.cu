// Exact-softmax attention over [batch·heads, n, head_dim] tensors, softmax(q·kᵀ·scale)·v, with an
// online (running max) softmax so no score matrix is ever stored. CPU twin: CpuBackend::attention
// (src/cpu/attention.rs).
//
// One thread owns one query row: its scaled q and its output accumulator live in registers. The
// block's 128 query rows walk the keys in tiles of ATT_TILE; each K/V tile is staged once in
// shared memory and read by all threads as broadcasts. Per tile the scores are computed first,
// then the running max is updated once, so the accumulator is rescaled once per tile.
// Exactness over speed: accurate expf, f32 throughout.

typedef unsigned long long u64;

#define ATT_THREADS 128
#define ATT_TILE 32
// −∞ without <math.h>/INFINITY, which NVRTC does not provide.
#define NEG_INF __int_as_float(0xff800000)

// D: the register width (head_dim rounded up); d: the real head_dim (≤ D). EXACT: d == D, so
// the masking of lanes ≥ d compiles away.
template <int D, bool EXACT>
__device__ void attention_rows(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                               float* __restrict__ out, u64 batch_heads, u64 n, u64 d, float scale) {
    __shared__ float ks[ATT_TILE][D];
    __shared__ float vs[ATT_TILE][D];
    // The [n, d] slice: grid y holds at most 65,535, so larger batch·heads spill into grid z.
    // The whole block leaves together (before any barrier) where y·z overshoots.
    const u64 slice = (u64)blockIdx.z * gridDim.y + blockIdx.y;
    if (slice >= batch_heads) return;
    const u64 base = slice * n * d;
    const u64 row = (u64)blockIdx.x * ATT_THREADS + threadIdx.x;
    const bool active = row < n;
    float qr[D], acc[D];
#pragma unroll
    for (int t = 0; t < D; ++t) {
        const bool in = active && (EXACT || (u64)t < d);
        qr[t] = in ? q[base + row * d + t] * scale : 0.0f;
        acc[t] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (u64 k0 = 0; k0 < n; k0 += ATT_TILE) {
        const u64 cnt = (n - k0) < ATT_TILE ? (n - k0) : ATT_TILE;
        __syncthreads();  // every thread is done with the previous tile
        for (int e = threadIdx.x; e < ATT_TILE * D; e += ATT_THREADS) {
            const int j = e / D, t = e % D;
            float kv = 0.0f, vv = 0.0f;
            if ((u64)j < cnt && (EXACT || (u64)t < d)) {
                const u64 at = base + (k0 + j) * d + t;
                kv = k[at];
                vv = v[at];
            }
            ks[j][t] = kv;
            vs[j][t] = vv;
        }
        __syncthreads();
        if (active) {
            float s[ATT_TILE];
            float tile_max = NEG_INF;
#pragma unroll
            for (int j = 0; j < ATT_TILE; ++j) {
                float dot = 0.0f;
#pragma unroll
                for (int t = 0; t < D; ++t) dot += qr[t] * ks[j][t];
                s[j] = (u64)j < cnt ? dot : NEG_INF;
                tile_max = fmaxf(tile_max, s[j]);
            }
            const float m_new = fmaxf(m, tile_max);
            const float corr = expf(m - m_new);  // m = −inf on the first tile: corr = 0
            l *= corr;
#pragma unroll
            for (int t = 0; t < D; ++t) acc[t] *= corr;
#pragma unroll
            for (int j = 0; j < ATT_TILE; ++j) {
                const float p = expf(s[j] - m_new);  // masked keys: exp(−inf) = 0
                l += p;
#pragma unroll
                for (int t = 0; t < D; ++t) acc[t] += p * vs[j][t];
            }
            m = m_new;
        }
    }
    if (active) {
        const float inv = 1.0f / l;
#pragma unroll
        for (int t = 0; t < D; ++t) {
            if (EXACT || (u64)t < d) out[base + row * d + t] = acc[t] * inv;
        }
    }
}

// head_dim 64 (F5): grid (ceil(n / 128), min(batch·heads, 65,535), overflow of y), block 128.
extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_d64(const float* q, const float* k,
                                                                         const float* v, float* out,
                                                                         u64 batch_heads, u64 n, float scale) {
    attention_rows<64, true>(q, k, v, out, batch_heads, n, 64, scale);
}

// Any head_dim ≤ 32.
extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_le32(const float* q, const float* k,
                                                                          const float* v, float* out,
                                                                          u64 batch_heads, u64 n, u64 d, float scale) {
    attention_rows<32, false>(q, k, v, out, batch_heads, n, d, scale);
}

// Any head_dim ≤ 64.
extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_le64(const float* q, const float* k,
                                                                          const float* v, float* out,
                                                                          u64 batch_heads, u64 n, u64 d, float scale) {
    attention_rows<64, false>(q, k, v, out, batch_heads, n, d, scale);
}
