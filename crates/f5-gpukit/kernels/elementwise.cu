// Pointwise ops. CPU twins: CpuBackend::{fill, gated_add, activation, cfg_combine, axpy,
// mask_rows, polar_spectrum, gemm (bias pass)} in src/cpu/mod.rs, and the f32 → bf16 rounding
// of the bf16 weight path.
//
// Accurate libdevice functions (expf, erff, tanhf, log1pf, sincosf), never the __fast variants:
// the kernels must agree with the CPU twin to ~1e-6.

typedef unsigned long long u64;

#define GRID_STRIDE(i, total) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (total); i += (u64)gridDim.x * blockDim.x)

extern "C" __global__ void fill_f32(float* x, u64 len, float value) {
    GRID_STRIDE(i, len) x[i] = value;
}

// x[r, j] += g[j]·y[r, j]
extern "C" __global__ void gated_add(float* x, const float* y, const float* g, u64 total, u64 d) {
    GRID_STRIDE(i, total) x[i] += g[i % d] * y[i];
}

extern "C" __global__ void gelu_erf(float* x, u64 len) {
    GRID_STRIDE(i, len) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

extern "C" __global__ void gelu_tanh(float* x, u64 len) {
    GRID_STRIDE(i, len) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

extern "C" __global__ void silu(float* x, u64 len) {
    GRID_STRIDE(i, len) {
        const float v = x[i];
        x[i] = v / (1.0f + expf(-v));
    }
}

// x·tanh(softplus(x)) with PyTorch's softplus threshold (softplus(x) = x above 20).
extern "C" __global__ void mish(float* x, u64 len) {
    GRID_STRIDE(i, len) {
        const float v = x[i];
        const float sp = v > 20.0f ? v : log1pf(expf(v));
        x[i] = v * tanhf(sp);
    }
}

// out = c + (c − u)·strength on pred = [c; u], each `half` long.
extern "C" __global__ void cfg_combine(const float* pred, float* out, u64 half, float strength) {
    GRID_STRIDE(i, half) {
        const float c = pred[i], u = pred[half + i];
        out[i] = c + (c - u) * strength;
    }
}

extern "C" __global__ void axpy(float a, const float* x, float* y, u64 len) {
    GRID_STRIDE(i, len) y[i] += a * x[i];
}

extern "C" __global__ void mask_rows(float* x, const float* keep, u64 total, u64 d) {
    GRID_STRIDE(i, total) {
        if (keep[i / d] == 0.0f) x[i] = 0.0f;
    }
}

// mag = min(exp(logmag), mag_max): exp first, then clip, so an overflowing exp gives mag_max.
extern "C" __global__ void polar_spectrum(const float* h, float* re, float* im, u64 frames, u64 bins,
                                          float mag_max) {
    GRID_STRIDE(i, frames * bins) {
        const u64 f = i / bins, j = i % bins;
        const float* row = h + f * 2 * bins;
        const float mag = fminf(expf(row[j]), mag_max);
        float s, c;
        sincosf(row[bins + j], &s, &c);
        re[i] = mag * c;
        im[i] = mag * s;
    }
}

// c[b, i, j] += bias[j] for the rows of a strided GEMM output.
extern "C" __global__ void add_bias_rows(float* c, const float* bias, u64 batch, u64 m, u64 n, u64 ldc,
                                         u64 batch_stride) {
    GRID_STRIDE(i, batch * m * n) {
        const u64 j = i % n, r = (i / n) % m, b = i / (n * m);
        c[b * batch_stride + r * ldc + j] += bias[j];
    }
}

// c[b, i, j] = 0 for the rows of a strided GEMM output: a product over k = 0 terms (beta = 0).
extern "C" __global__ void zero_rows(float* c, u64 batch, u64 m, u64 n, u64 ldc, u64 batch_stride) {
    GRID_STRIDE(i, batch * m * n) {
        const u64 j = i % n, r = (i / n) % m, b = i / (n * m);
        c[b * batch_stride + r * ldc + j] = 0.0f;
    }
}

// f32 → bf16 bits, round to nearest even; NaN stays a (quiet) NaN.
extern "C" __global__ void f32_to_bf16(const float* x, unsigned short* y, u64 len) {
    GRID_STRIDE(i, len) {
        const unsigned int u = __float_as_uint(x[i]);
        unsigned short r;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            r = (unsigned short)((u >> 16) | 0x0040u);
        } else {
            r = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
        y[i] = r;
    }
}
