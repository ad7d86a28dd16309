// The sequence ops of the second model family (Kokoro: StyleTTS2 + ISTFTNet), on channels-last
// [batch, n, c]: the general 1-D convolution (stride, dilation, reflect/replicate padding), the
// transposed convolution, the LSTM recurrence, instance norm, Snake, resampling, padding, the
// f64 running sum, STFT/iSTFT as direct DFTs and the parameterised activations.
// CPU twins: src/cpu/{conv,seq,spectral}.rs and CpuBackend::activation.
//
// No headers (NVRTC has no libc); accurate libdevice functions only (expf, tanhf, sinf, sincosf,
// cos/sin in double), never the __fast variants. Where the CPU twin's f32 arithmetic is to be
// reproduced bit for bit (interpolation, Snake, the instance-norm apply step) the products and
// sums are written with __fmul_rn/__fadd_rn, which nvcc never contracts into an FMA: a fused
// multiply-add rounds once where the CPU rounds twice.

typedef unsigned long long u64;

#define GRID_STRIDE(i, total) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (total); i += (u64)gridDim.x * blockDim.x)

#define PI_D 3.14159265358979323846
#define PI_F 3.14159265358979323846f

// PadMode as the host passes it: 0 zeros, 1 reflect, 2 replicate.
// The input row that padded position p reads (the input starts at `left`), or −1 for a zero.
// The host checked n > 0 and, for reflect, that both pads are < n (spec.rs: PadMode::check).
__device__ __forceinline__ long long pad_source(u64 p, u64 left, u64 n, int mode) {
    const long long i = (long long)p - (long long)left;
    const long long nn = (long long)n;
    if (i >= 0 && i < nn) return i;
    if (mode == 1) return i < 0 ? -i : 2 * (nn - 1) - i;
    if (mode == 2) return i < 0 ? 0 : nn - 1;
    return -1;
}

// ── convolutions ─────────────────────────────────────────────────────────────────────────────

// Any stride, dilation and padding mode; dense, grouped or depthwise. One thread per output
// value (b, t, co); consecutive threads take consecutive output channels. The host keeps the
// tiled stride-1 zero-padding kernels of conv.cu for the shapes they cover.
extern "C" __global__ void conv1d_general(const float* x, const float* w, const float* bias, float* y, u64 batch,
                                          u64 n, u64 c_in, u64 c_out, u64 kernel, u64 pad, u64 groups,
                                          u64 n_out, u64 stride, u64 dilation, int pad_mode, int has_bias) {
    const u64 cin_g = c_in / groups, cout_g = c_out / groups;
    GRID_STRIDE(i, batch * n_out * c_out) {
        const u64 co = i % c_out;
        const u64 t = (i / c_out) % n_out;
        const u64 b = i / (c_out * n_out);
        const u64 g = co / cout_g;
        const float* xb = x + b * n * c_in + g * cin_g;
        const float* wf = w + co * cin_g * kernel;
        float acc = 0.0f;
        for (u64 k = 0; k < kernel; ++k) {
            const long long s = pad_source(t * stride + k * dilation, pad, n, pad_mode);
            if (s < 0) continue;
            const float* xr = xb + (u64)s * c_in;
            for (u64 ci = 0; ci < cin_g; ++ci) acc += wf[ci * kernel + k] * xr[ci];
        }
        // Bias last, like the CPU twin (bias row, then the GEMM's sum added with beta = 1).
        y[i] = has_bias ? bias[co] + acc : acc;
    }
}

// nn.ConvTranspose1d (dilation 1) with a PyTorch weight [c_in, c_out/groups, kernel]: input row i
// adds x[i]·w[k] into output row i·stride + k − pad. One thread per output value gathers the
// (input row, tap) pairs landing on it: k = o + pad − i·stride ∈ [0, kernel). Output rows past the
// last tap (output_padding) get the bias only.
extern "C" __global__ void conv_transpose1d(const float* x, const float* w, const float* bias, float* y, u64 batch,
                                            u64 n, u64 c_in, u64 c_out, u64 kernel, u64 stride, u64 pad,
                                            u64 groups, u64 n_out, int has_bias) {
    const u64 cin_g = c_in / groups, cout_g = c_out / groups;
    GRID_STRIDE(e, batch * n_out * c_out) {
        const u64 co = e % c_out;
        const u64 o = (e / c_out) % n_out;
        const u64 b = e / (c_out * n_out);
        const u64 g = co / cout_g, col = co % cout_g;
        const u64 p = o + pad;
        // i ≥ ⌈(p − kernel + 1)/stride⌉ and i ≤ ⌊p/stride⌋, within 0..n.
        const u64 lo = p + 1 > kernel ? (p + 1 - kernel + stride - 1) / stride : 0;
        u64 hi = p / stride;
        if (hi > n - 1) hi = n - 1;
        float acc = 0.0f;
        for (u64 i = lo; i <= hi && n > 0; ++i) {
            const u64 k = p - i * stride;
            const float* xr = x + (b * n + i) * c_in + g * cin_g;
            const float* wk = w + (g * cin_g * cout_g + col) * kernel + k;  // + ci·cout_g·kernel
            for (u64 ci = 0; ci < cin_g; ++ci) acc += xr[ci] * wk[ci * cout_g * kernel];
        }
        y[e] = has_bias ? bias[co] + acc : acc;
    }
}

// ── LSTM ─────────────────────────────────────────────────────────────────────────────────────

__device__ __forceinline__ float sigmoid_f(float v) { return 1.0f / (1.0f + expf(-v)); }

// The recurrence of one LSTM direction, PyTorch gate order (i, f, g, o):
// gates = gates_x[b, t] + W_hh·h, c = σ(f)·c + σ(i)·tanh(g), h = σ(o)·tanh(c).
// One block per batch item (grid-stride over items), looping over that item's own lengths[b]
// steps (reverse: len−1 down to 0); rows len..n of its output are zero. Dynamic shared memory:
// h, c and the 4·hidden gates (6·hidden floats). Each warp computes whole gate rows: its lanes
// read consecutive W_hh values of one row (coalesced) and reduce with shuffles.
extern "C" __global__ void lstm_seq(const float* gates_x, const float* w_hh, const float* h0, const float* c0,
                                    const u64* lengths, float* out, u64 batch, u64 n, u64 hidden, int reverse,
                                    u64 out_offset, u64 out_stride, int has_state) {
    extern __shared__ float smem[];
    float* hs = smem;
    float* cs = smem + hidden;
    float* gates = smem + 2 * hidden;
    const u64 g4 = 4 * hidden;
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (u64 b = blockIdx.x; b < batch; b += gridDim.x) {
        u64 len = lengths[b];
        if (len > n) len = n;  // validated on the host; kept so a bad copy cannot read past gates_x
        __syncthreads();  // the previous item's last step is done with hs/cs
        for (u64 j = threadIdx.x; j < hidden; j += blockDim.x) {
            hs[j] = has_state ? h0[b * hidden + j] : 0.0f;
            cs[j] = has_state ? c0[b * hidden + j] : 0.0f;
        }
        __syncthreads();
        for (u64 step = 0; step < len; ++step) {
            const u64 t = reverse ? len - 1 - step : step;
            const float* gx = gates_x + (b * n + t) * g4;
            for (u64 r = warp; r < g4; r += warps) {
                const float* wr = w_hh + r * hidden;
                float s = 0.0f;
                for (u64 j = lane; j < hidden; j += 32) s += wr[j] * hs[j];
                for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (lane == 0) gates[r] = gx[r] + s;
            }
            __syncthreads();  // every gate is written before h and c change
            float* orow = out + out_offset + (b * n + t) * out_stride;
            for (u64 j = threadIdx.x; j < hidden; j += blockDim.x) {
                const float ig = sigmoid_f(gates[j]);
                const float fg = sigmoid_f(gates[hidden + j]);
                const float gg = tanhf(gates[2 * hidden + j]);
                const float og = sigmoid_f(gates[3 * hidden + j]);
                const float c = __fadd_rn(__fmul_rn(fg, cs[j]), __fmul_rn(ig, gg));
                const float h = __fmul_rn(og, tanhf(c));
                cs[j] = c;
                hs[j] = h;
                orow[j] = h;
            }
            __syncthreads();  // h is complete before the next step's matvec reads it
        }
        for (u64 e = threadIdx.x; e < (n - len) * hidden; e += blockDim.x) {
            const u64 t = len + e / hidden, j = e % hidden;
            out[out_offset + (b * n + t) * out_stride + j] = 0.0f;
        }
    }
}

// ── instance norm ────────────────────────────────────────────────────────────────────────────

#define IN_ROWS 8

// Per (item, channel) statistics over the n rows, two passes in double like the CPU twin (the
// mean, then Σ(x − mean)²), then y = (x − mean)·scale + shift with scale = (1 + γ)·w·rstd and
// shift = (1 + γ)·bias + β folded in double and rounded to f32 as the twin does. Block (32, 8):
// 32 consecutive channels (coalesced rows) × 8 row lanes; grid x = channel tiles, grid y strides
// over batch items.
extern "C" __global__ void instance_norm(const float* x, float* out, u64 batch, u64 n, u64 c, float eps,
                                         const float* weight, const float* bias, const float* style, int has_affine,
                                         int has_style) {
    __shared__ double part[IN_ROWS][33];
    __shared__ double stat[32];
    const u64 ch = (u64)blockIdx.x * 32 + threadIdx.x;
    const bool live = ch < c;
    for (u64 b = blockIdx.y; b < batch; b += gridDim.y) {
        const float* xb = x + b * n * c;
        float* ob = out + b * n * c;
        double s = 0.0;
        if (live)
            for (u64 t = threadIdx.y; t < n; t += IN_ROWS) s += (double)xb[t * c + ch];
        __syncthreads();  // part/stat of the previous item are consumed
        part[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0) {
            double tot = 0.0;
            for (int r = 0; r < IN_ROWS; ++r) tot += part[r][threadIdx.x];
            stat[threadIdx.x] = tot / (double)n;
        }
        __syncthreads();
        const double mean = stat[threadIdx.x];
        double q = 0.0;
        if (live)
            for (u64 t = threadIdx.y; t < n; t += IN_ROWS) {
                const double d = (double)xb[t * c + ch] - mean;
                q += d * d;
            }
        part[threadIdx.y][threadIdx.x] = q;
        __syncthreads();
        double var = 0.0;
        for (int r = 0; r < IN_ROWS; ++r) var += part[r][threadIdx.x];
        if (!live) continue;
        const double rstd = 1.0 / sqrt(var / (double)n + (double)eps);
        const double wv = has_affine ? (double)weight[ch] : 1.0, bv = has_affine ? (double)bias[ch] : 0.0;
        const double gamma = has_style ? (double)style[b * 2 * c + ch] : 0.0;
        const double beta = has_style ? (double)style[b * 2 * c + c + ch] : 0.0;
        const float scale = (float)__dmul_rn(__dmul_rn(1.0 + gamma, wv), rstd);
        const float shift = (float)__dadd_rn(__dmul_rn(1.0 + gamma, bv), beta);
        const float mean32 = (float)mean;
        for (u64 t = threadIdx.y; t < n; t += IN_ROWS)
            ob[t * c + ch] = __fadd_rn(__fmul_rn(__fsub_rn(xb[t * c + ch], mean32), scale), shift);
    }
}

// ── pointwise and resampling ─────────────────────────────────────────────────────────────────

// x + (1/α)·sin(α·x)², α per channel, as the CPU twin writes it.
extern "C" __global__ void snake(float* x, const float* alpha, u64 total, u64 c) {
    GRID_STRIDE(i, total) {
        const float a = alpha[i % c];
        const float s = sinf(__fmul_rn(a, x[i]));
        x[i] = __fadd_rn(x[i], __fmul_rn(1.0f / a, __fmul_rn(s, s)));
    }
}

// [batch, n, c] → [batch, n·factor, c], every row repeated `factor` times.
extern "C" __global__ void upsample_nearest(const float* x, float* out, u64 total, u64 n, u64 c, u64 factor) {
    GRID_STRIDE(i, total) {
        const u64 j = i % c, r = i / c;
        const u64 b = r / (n * factor), t = r % (n * factor);
        out[i] = x[(b * n + t / factor) * c + j];
    }
}

// F.interpolate(mode="linear", align_corners=False) in PyTorch's f32 arithmetic, exactly as the
// CPU twin: src = max(ratio·(t + 0.5) − 0.5, 0), i0 = ⌊src⌋ (clamped), i1 = i0 + 1 unless i0 is
// the last row, out = (1 − λ)·x[i0] + λ·x[i1] with λ = src − i0.
extern "C" __global__ void interpolate_linear(const float* x, float* out, u64 batch, u64 n_in, u64 n_out, u64 c,
                                              float ratio) {
    GRID_STRIDE(e, batch * n_out * c) {
        const u64 j = e % c, r = e / c;
        const u64 b = r / n_out, t = r % n_out;
        const float src = fmaxf(__fsub_rn(__fmul_rn(ratio, __fadd_rn((float)t, 0.5f)), 0.5f), 0.0f);
        u64 i0 = (u64)src;
        if (i0 > n_in - 1) i0 = n_in - 1;
        const u64 i1 = i0 + 1 < n_in ? i0 + 1 : i0;
        const float l1 = __fsub_rn(src, (float)i0);
        const float l0 = __fsub_rn(1.0f, l1);
        // fma(t0, w0, t1·w1): PyTorch's x86 build contracts `t0*w0 + t1*w1` this way, and the CPU
        // twin computes the same (Kokoro's source interpolates ~1e4-rad phases: ulps matter).
        out[e] = __fmaf_rn(x[(b * n_in + i0) * c + j], l0, __fmul_rn(x[(b * n_in + i1) * c + j], l1));
    }
}

// [batch, n, c] → [batch, left + n + right, c] with zero, reflect or replicate padding.
extern "C" __global__ void pad1d(const float* x, float* out, u64 batch, u64 n, u64 c, u64 left, u64 n_out,
                                 int mode) {
    GRID_STRIDE(e, batch * n_out * c) {
        const u64 j = e % c, r = e / c;
        const u64 b = r / n_out, p = r % n_out;
        const long long s = pad_source(p, left, n, mode);
        out[e] = s < 0 ? 0.0f : x[(b * n + (u64)s) * c + j];
    }
}

// Running sum down the rows of every (item, channel) column, accumulated in double and rounded
// once per output, as the CPU twin. One thread per column walks its rows in order (consecutive
// threads on consecutive channels, so each row is read coalesced).
extern "C" __global__ void cumsum_f64(const float* x, float* out, u64 batch, u64 n, u64 c) {
    GRID_STRIDE(col, batch * c) {
        const u64 b = col / c, j = col % c;
        const float* xb = x + b * n * c + j;
        float* ob = out + b * n * c + j;
        double acc = 0.0;
        for (u64 t = 0; t < n; ++t) {
            acc += (double)xb[t * c];
            ob[t * c] = (float)acc;
        }
    }
}

// ── STFT ─────────────────────────────────────────────────────────────────────────────────────

// The periodic Hann window and the twiddle angle 2π·((k·t) mod N)/N, in double as the CPU twin.
__device__ __forceinline__ double hann_d(u64 t, u64 n_fft) { return 0.5 - 0.5 * cos(2.0 * PI_D * (double)t / (double)n_fft); }
__device__ __forceinline__ double twiddle_angle(u64 k, u64 t, u64 n_fft) {
    return 2.0 * PI_D * (double)((k * t) % n_fft) / (double)n_fft;
}

// torch.stft (Hann window, center=True, reflect padding, onesided) as magnitude and phase
// [batch, frames, bins]: one thread per (item, frame, bin), a direct DFT in double. DC and
// Nyquist bins have imaginary part +0, so their phase is exactly 0 or +π (atan2(+0, re)).
extern "C" __global__ void stft_direct(const float* signal, float* mag, float* phase, u64 batch, u64 frames,
                                       u64 n_fft, u64 hop) {
    const u64 bins = n_fft / 2 + 1, half = n_fft / 2, samples = hop * (frames - 1);
    GRID_STRIDE(e, batch * frames * bins) {
        const u64 k = e % bins, f = (e / bins) % frames, b = e / (bins * frames);
        const float* xb = signal + b * samples;
        double re = 0.0, im = 0.0;
        for (u64 t = 0; t < n_fft; ++t) {
            const long long s = pad_source(f * hop + t, half, samples, 1);
            const double v = (double)xb[s] * hann_d(t, n_fft);
            double sn, cs;
            sincos(twiddle_angle(k, t, n_fft), &sn, &cs);
            re += v * cs;
            im -= v * sn;
        }
        const bool real_bin = k == 0 || 2 * k == n_fft;
        if (real_bin) im = 0.0;
        const float re32 = (float)re, im32 = (float)im;
        mag[e] = hypotf(re32, im32);
        // atan2(+0, re) is +0 for re ≥ +0 and +π for re ≤ −0: written out, so no library
        // difference can produce −π or a rounding residue.
        phase[e] = real_bin ? ((__float_as_uint(re32) >> 31) ? PI_F : 0.0f) : atan2f(im32, re32);
    }
}

// torch.istft of mag·e^{i·phase}: one thread per output sample gathers the frames overlapping it
// (increasing frame order, as the CPU twin's overlap-add), each an inverse one-sided DFT at that
// tap (DC and Nyquist once, their imaginary parts ignored; interior bins twice) times the window,
// divided by the summed squared window; `center` trimmed (sample i is padded position i + N/2).
extern "C" __global__ void istft_direct(const float* mag, const float* phase, float* signal, u64 batch, u64 frames,
                                        u64 n_fft, u64 hop) {
    const u64 bins = n_fft / 2 + 1, half = n_fft / 2, samples = hop * (frames - 1);
    GRID_STRIDE(e, batch * samples) {
        const u64 i = e % samples, b = e / samples;
        const u64 q = i + half;
        const u64 f_lo = q + 1 > n_fft ? (q + 1 - n_fft + hop - 1) / hop : 0;
        u64 f_hi = q / hop;
        if (f_hi > frames - 1) f_hi = frames - 1;
        double ola = 0.0, env = 0.0;
        for (u64 f = f_lo; f <= f_hi; ++f) {
            const u64 t = q - f * hop;
            const u64 base = (b * frames + f) * bins;
            // Same order as the twin: DC + Nyquist first, then the interior bins.
            double acc = (double)mag[base] * (double)cosf(phase[base]) +
                         (double)mag[base + half] * (double)cosf(phase[base + half]) * cos(twiddle_angle(half, t, n_fft));
            for (u64 k = 1; k < half; ++k) {
                float sp, cp;
                sincosf(phase[base + k], &sp, &cp);
                const double m = (double)mag[base + k];
                const double re = m * (double)cp, im = m * (double)sp;
                double sn, cs;
                sincos(twiddle_angle(k, t, n_fft), &sn, &cs);
                acc += 2.0 * (re * cs - im * sn);
            }
            const double win = hann_d(t, n_fft);
            ola += acc / (double)n_fft * win;
            env += win * win;
        }
        signal[e] = (float)(ola / env);
    }
}

// ── parameterised activations (in place) ─────────────────────────────────────────────────────

extern "C" __global__ void leaky_relu(float* x, u64 len, float slope) {
    GRID_STRIDE(i, len) {
        const float v = x[i];
        x[i] = v >= 0.0f ? v : v * slope;
    }
}

extern "C" __global__ void sigmoid_act(float* x, u64 len) {
    GRID_STRIDE(i, len) x[i] = sigmoid_f(x[i]);
}

extern "C" __global__ void tanh_act(float* x, u64 len) {
    GRID_STRIDE(i, len) x[i] = tanhf(x[i]);
}

extern "C" __global__ void sin_act(float* x, u64 len) {
    GRID_STRIDE(i, len) x[i] = sinf(x[i]);
}

extern "C" __global__ void exp_act(float* x, u64 len) {
    GRID_STRIDE(i, len) x[i] = expf(x[i]);
}

extern "C" __global__ void scale_act(float* x, u64 len, float factor) {
    GRID_STRIDE(i, len) x[i] = x[i] * factor;
}
