// Data movement: head split with interleaved-pair RoPE, head merge, strided row copies (feature
// concat and split) and the embedding gather. CPU twins: CpuBackend::{split_heads_rope,
// merge_heads, concat_features, split_features, embedding} in src/cpu/mod.rs.

typedef unsigned long long u64;

#define GRID_STRIDE(i, total) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (total); i += (u64)gridDim.x * blockDim.x)

// One thread per rotation pair of the [batch·heads, n, hd] output. The source row (b, p) starts at
// src_off + (b·n + p)·src_stride; head h is its h-th hd-wide slice. The first rope_heads heads
// rotate (x0, x1) = (x[2j], x[2j+1]) by the angle with cos/sin tables [n, hd/2].
extern "C" __global__ void split_heads_rope(const float* src, const float* cos_t, const float* sin_t, float* dst,
                                            u64 batch, u64 n, u64 heads, u64 hd, u64 rope_heads, u64 src_off,
                                            u64 src_stride) {
    const u64 half = hd / 2;
    GRID_STRIDE(i, batch * heads * n * half) {
        const u64 j = i % half;
        const u64 p = (i / half) % n;
        const u64 bh = i / (half * n);
        const u64 h = bh % heads, b = bh / heads;
        const float* in = src + src_off + (b * n + p) * src_stride + h * hd;
        float* out = dst + (bh * n + p) * hd;
        const float x0 = in[2 * j], x1 = in[2 * j + 1];
        if (h < rope_heads) {
            const float c = cos_t[p * half + j], s = sin_t[p * half + j];
            out[2 * j] = x0 * c - x1 * s;
            out[2 * j + 1] = x1 * c + x0 * s;
        } else {
            out[2 * j] = x0;
            out[2 * j + 1] = x1;
        }
    }
}

// [batch·heads, n, hd] → [batch, n, heads·hd]; one thread per output value.
extern "C" __global__ void merge_heads(const float* src, float* dst, u64 batch, u64 n, u64 heads, u64 hd) {
    GRID_STRIDE(i, batch * n * heads * hd) {
        const u64 t = i % hd;
        const u64 h = (i / hd) % heads;
        const u64 row = i / (hd * heads);
        const u64 b = row / n, p = row % n;
        dst[i] = src[((b * heads + h) * n + p) * hd + t];
    }
}

// dst[r·dst_stride + j] = src[r·src_stride + j] for r < rows, j < width.
extern "C" __global__ void copy_rows(const float* src, u64 src_stride, float* dst, u64 dst_stride, u64 rows,
                                     u64 width) {
    GRID_STRIDE(i, rows * width) {
        const u64 r = i / width, j = i % width;
        dst[r * dst_stride + j] = src[r * src_stride + j];
    }
}

// out[r, :] = table[ids[r], :]; ids were checked against the table size on the host.
extern "C" __global__ void embedding(const float* table, const unsigned int* ids, float* out, u64 count, u64 dim) {
    GRID_STRIDE(i, count * dim) {
        const u64 r = i / dim, j = i % dim;
        out[i] = table[(u64)ids[r] * dim + j];
    }
}
