// tensormem standard op set in CUDA C, compiled at startup with NVRTC (see kernels.rs).
//
// Each kernel implements one `tensormem::ops::Op` exactly as core/src/ops.rs documents it; the
// host implementation is the numerical reference. Conventions:
//   * every kernel is `extern "C"` so its name is not mangled and kernels.rs can look it up;
//   * parameters are pointers (device addresses of the bindings, inputs then outputs), then the
//     op's parameters as `unsigned int` / `float` in the order launch.rs pushes them (a test in
//     kernels/tests.rs parses these signatures and checks them against launch.rs);
//   * all loops are grid-stride loops over 64-bit indices, so any grid the launch math picks is
//     correct and element counts up to 2^32 - 1 never overflow an index;
//   * row kernels (layernorm, softmax, l2normalize) use one block per row, a power-of-two block
//     size and blockDim.x floats of dynamic shared memory for the reductions.
// No headers: NVRTC provides the built-ins (erff, expf, sqrtf, fmaxf, __int_as_float, pow,
// sinf, cosf, roundf).

typedef unsigned int u32;
typedef unsigned long long u64;

#define TM_TILE 16

#define TM_GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n); \
         i += (u64)blockDim.x * gridDim.x)

__device__ __forceinline__ float tm_neg_inf() { return __int_as_float(0xff800000); }

// Sum of `v` over the block. Requires blockDim.x to be a power of two and `sh` to hold
// blockDim.x floats. Every thread of the block must call it (it synchronises).
__device__ float tm_block_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// Sum of the squares of row `xr`'s `cols` elements over the block, each thread summing a strided
// share first; same rules as tm_block_sum.
__device__ float tm_block_sum_squares(const float* xr, u32 cols, float* sh) {
    float q = 0.0f;
    for (u32 j = threadIdx.x; j < cols; j += blockDim.x) q += xr[j] * xr[j];
    return tm_block_sum(q, sh);
}

// Maximum of `v` over the block, same rules as tm_block_sum.
__device__ float tm_block_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// IEEE binary16 bits to float (exact; NVRTC has no cuda_fp16.h without headers).
__device__ __forceinline__ float tm_half_to_float(unsigned short h) {
    const u32 sign = (u32)(h & 0x8000u) << 16;
    const u32 exp = (h >> 10) & 0x1fu;
    const u32 man = h & 0x3ffu;
    if (exp == 0) {
        const float v = (float)man * 5.9604644775390625e-8f;  // subnormal: man * 2^-24
        return sign ? -v : v;
    }
    if (exp == 31) return __int_as_float((int)(sign | 0x7f800000u | (man << 13)));
    return __int_as_float((int)(sign | ((exp + 112u) << 23) | (man << 13)));
}

// Weight element `e` dequantised as it is loaded (tensormem::ops::quant): fmt 0 f32, 1 f16,
// 2 int8 times scales[s] (s = channel * groups + inner / group).
__device__ __forceinline__ float tm_weight_at(const void* w, const float* scales, u32 fmt, u64 e,
                                              u64 s) {
    if (fmt == 1) return tm_half_to_float(((const unsigned short*)w)[e]);
    if (fmt == 2) return (float)((const signed char*)w)[e] * scales[s];
    return ((const float*)w)[e];
}

// Op::MatMul. C[b] = alpha * op(A[b]) . op(B[b]) (+ bias), tiled 16x16 through shared memory.
// grid.x walks column tiles, grid.y row tiles, grid.z batches (all grid-stride). B is stored in
// `fmt` (tm_weight_at); `scales` is null unless int8.
extern "C" __global__ void tm_matmul(const float* a, const void* b, const float* scales,
                                     const float* bias, float* c, u32 batch, u32 m, u32 n, u32 k,
                                     u32 trans_a, u32 trans_b, u32 broadcast_b, u32 has_bias,
                                     float alpha, u32 fmt, u32 group, u32 groups) {
    __shared__ float as[TM_TILE][TM_TILE];
    __shared__ float bs[TM_TILE][TM_TILE + 1];
    const u32 tx = threadIdx.x, ty = threadIdx.y;
    const u32 tiles_m = (m + TM_TILE - 1) / TM_TILE;
    const u32 tiles_n = (n + TM_TILE - 1) / TM_TILE;
    for (u32 bt = blockIdx.z; bt < batch; bt += gridDim.z) {
        const float* ab = a + (u64)bt * m * k;
        const u64 b_mat = broadcast_b ? (u64)0 : (u64)bt;
        for (u32 tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
            for (u32 tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
                const u32 row = tm * TM_TILE + ty;
                const u32 col = tn * TM_TILE + tx;
                float acc = 0.0f;
                for (u32 t0 = 0; t0 < k; t0 += TM_TILE) {
                    const u32 ka = t0 + tx;
                    float va = 0.0f;
                    if (row < m && ka < k)
                        va = trans_a ? ab[(u64)ka * m + row] : ab[(u64)row * k + ka];
                    as[ty][tx] = va;
                    const u32 kb = t0 + ty;
                    float vb = 0.0f;
                    if (kb < k && col < n) {
                        const u64 e = b_mat * k * n +
                                      (trans_b ? (u64)col * k + kb : (u64)kb * n + col);
                        vb = tm_weight_at(b, scales, fmt, e, (b_mat * n + col) * groups + kb / group);
                    }
                    bs[ty][tx] = vb;
                    __syncthreads();
                    for (u32 q = 0; q < TM_TILE; ++q) acc += as[ty][q] * bs[q][tx];
                    __syncthreads();
                }
                if (row < m && col < n) {
                    float v = alpha * acc;
                    if (has_bias) v += bias[col];
                    c[((u64)bt * m + row) * n + col] = v;
                }
            }
        }
    }
}

// Op::MatMul with int8-dynamic weights (tensormem::ops::quant): row i of op(A[b]) spans [lo, hi]
// (widened to hold 0) and is quantised to u = clamp(rint(a * inv) + z, 0, 255) with
// inv = 255 / (hi - lo), z = rint(-lo * inv); each scale group g of column j sums
// d_g = (u - z) * w in 32-bit integers, and C = alpha * (((hi - lo) / 255) * sum_g scale * d_g)
// + bias, the groups in order, without fused multiply-adds (the host's rounding). One thread per
// element of C (grid-stride) finds its row's range itself: simple rather than fast, as the
// format serves CPUs. tm_matmul's arguments (fmt is unused: the weight is int8).
extern "C" __global__ void tm_matmul_dynamic(const float* a, const void* b, const float* scales,
                                             const float* bias, float* c, u32 batch, u32 m, u32 n,
                                             u32 k, u32 trans_a, u32 trans_b, u32 broadcast_b,
                                             u32 has_bias, float alpha, u32 fmt, u32 group,
                                             u32 groups) {
    (void)fmt;
    const signed char* w = (const signed char*)b;
    const u64 total = (u64)batch * m * n;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (u64)gridDim.x * blockDim.x) {
        const u64 bt = e / ((u64)m * n);
        const u32 i = (u32)(e / n % m);
        const u32 j = (u32)(e % n);
        const float* ab = a + bt * m * k;
        const u64 b_mat = broadcast_b ? (u64)0 : bt;
        float lo = 0.0f, hi = 0.0f, poison = 0.0f;  // poison: NaN iff a value is not finite
        for (u32 p = 0; p < k; ++p) {
            const float v = trans_a ? ab[(u64)p * m + i] : ab[(u64)i * k + p];
            lo = fminf(lo, v);
            hi = fmaxf(hi, v);
            poison = __fadd_rn(poison, __fmul_rn(v, 0.0f));
        }
        const float span = __fadd_rn(hi, -lo);
        if (!(span <= 3.402823466e38f) || poison != poison) {
            c[e] = __int_as_float(0x7fc00000);
            continue;
        }
        const float inv = span > 0.0f ? __fdiv_rn(255.0f, span) : 0.0f;
        const int z = (int)rintf(__fmul_rn(-lo, inv));
        float acc = 0.0f;
        int d = 0;
        for (u32 p = 0; p < k; ++p) {
            const float v = trans_a ? ab[(u64)p * m + i] : ab[(u64)i * k + p];
            const u64 we = b_mat * k * n + (trans_b ? (u64)j * k + p : (u64)p * n + j);
            int u = (int)rintf(__fmul_rn(v, inv)) + z;
            u = u < 0 ? 0 : (u > 255 ? 255 : u);
            d += (u - z) * (int)w[we];
            if ((p + 1) % group == 0 || p + 1 == k) {
                const float s = scales[(b_mat * n + j) * groups + p / group];
                acc = __fadd_rn(acc, __fmul_rn(s, (float)d));
                d = 0;
            }
        }
        float out = __fmul_rn(alpha, __fmul_rn(__fdiv_rn(span, 255.0f), acc));
        if (has_bias) out = __fadd_rn(out, bias[j]);
        c[e] = out;
    }
}

// Op::Add: c[i] = a[i] + b[i % b_len].
extern "C" __global__ void tm_add(const float* a, const float* b, float* c, u32 len, u32 b_len) {
    TM_GRID_STRIDE(i, len) { c[i] = a[i] + b[i % b_len]; }
}

// Op::Mul: c[i] = a[i] * b[i % b_len].
extern "C" __global__ void tm_mul(const float* a, const float* b, float* c, u32 len, u32 b_len) {
    TM_GRID_STRIDE(i, len) { c[i] = a[i] * b[i % b_len]; }
}

// Op::Scale: y[i] = alpha * x[i].
extern "C" __global__ void tm_scale(const float* x, float* y, u32 len, float alpha) {
    TM_GRID_STRIDE(i, len) { y[i] = alpha * x[i]; }
}

// Op::Gelu (exact): y = x/2 * (1 + erf(x / sqrt(2))).
extern "C" __global__ void tm_gelu(const float* x, float* y, u32 len) {
    TM_GRID_STRIDE(i, len) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// Op::Relu: y = max(x, 0).
extern "C" __global__ void tm_relu(const float* x, float* y, u32 len) {
    TM_GRID_STRIDE(i, len) { y[i] = fmaxf(x[i], 0.0f); }
}

// Op::LayerNorm over rows of `cols`: population variance, two passes for accuracy.
extern "C" __global__ void tm_layernorm(const float* x, const float* gamma, const float* beta,
                                        float* y, u32 rows, u32 cols, float eps) {
    extern __shared__ float sh[];
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + (u64)r * cols;
        float* yr = y + (u64)r * cols;
        float s = 0.0f;
        for (u32 j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
        const float mean = tm_block_sum(s, sh) / (float)cols;
        float q = 0.0f;
        for (u32 j = threadIdx.x; j < cols; j += blockDim.x) {
            const float d = xr[j] - mean;
            q += d * d;
        }
        const float var = tm_block_sum(q, sh) / (float)cols;
        const float inv = 1.0f / sqrtf(var + eps);
        for (u32 j = threadIdx.x; j < cols; j += blockDim.x)
            yr[j] = (xr[j] - mean) * inv * gamma[j] + beta[j];
    }
}

// Op::Softmax over rows of `cols`, optionally masked (mask row r / rows_per_mask; 0.0 drops a
// column). A row whose mask drops every column is all zeros.
extern "C" __global__ void tm_softmax(const float* x, const float* mask, float* y, u32 rows,
                                      u32 cols, u32 masked, u32 rows_per_mask) {
    extern __shared__ float sh[];
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + (u64)r * cols;
        const float* mr = masked ? mask + (u64)(r / rows_per_mask) * cols : (const float*)0;
        float* yr = y + (u64)r * cols;
        float mx = tm_neg_inf();
        float kept = 0.0f;
        for (u32 j = threadIdx.x; j < cols; j += blockDim.x) {
            if (!mr || mr[j] != 0.0f) {
                mx = fmaxf(mx, xr[j]);
                kept += 1.0f;
            }
        }
        mx = tm_block_max(mx, sh);
        kept = tm_block_sum(kept, sh);
        if (kept == 0.0f) {
            for (u32 j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = 0.0f;
            continue;  // uniform across the block: `kept` is the block-wide sum
        }
        float s = 0.0f;
        for (u32 j = threadIdx.x; j < cols; j += blockDim.x) {
            const float e = (!mr || mr[j] != 0.0f) ? expf(xr[j] - mx) : 0.0f;
            yr[j] = e;
            s += e;
        }
        const float sum = tm_block_sum(s, sh);
        for (u32 j = threadIdx.x; j < cols; j += blockDim.x) yr[j] /= sum;
    }
}

// Op::Embedding: out[r, d] = table[ids[r], d] (stored in `fmt`), zeros for an id >= vocab.
extern "C" __global__ void tm_embedding(const void* table, const float* scales, const u32* ids,
                                        float* out, u32 vocab, u32 dim, u32 rows, u32 fmt,
                                        u32 group, u32 groups) {
    TM_GRID_STRIDE(i, (u64)rows * dim) {
        const u64 r = i / dim, d = i % dim;
        const u32 id = ids[r];
        out[i] = id < vocab ? tm_weight_at(table, scales, fmt, (u64)id * dim + d,
                                           (u64)id * groups + d / group)
                            : 0.0f;
    }
}

// Op::MeanPool: out[b, d] = sum_s mask[b, s] * x[b, s, d] / max(sum_s mask[b, s], 1e-9).
extern "C" __global__ void tm_meanpool(const float* x, const float* mask, float* out, u32 batch,
                                       u32 seq, u32 dim) {
    TM_GRID_STRIDE(i, (u64)batch * dim) {
        const u64 bi = i / dim, d = i % dim;
        float s = 0.0f, m = 0.0f;
        for (u32 t = 0; t < seq; ++t) {
            const float w = mask[bi * seq + t];
            s += w * x[(bi * seq + t) * dim + d];
            m += w;
        }
        out[i] = s / fmaxf(m, 1e-9f);
    }
}

// Op::L2Normalize: y = x / max(||x||_2, eps) per row.
extern "C" __global__ void tm_l2normalize(const float* x, float* y, u32 rows, u32 cols, float eps) {
    extern __shared__ float sh[];
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + (u64)r * cols;
        float* yr = y + (u64)r * cols;
        const float norm = fmaxf(sqrtf(tm_block_sum_squares(xr, cols, sh)), eps);
        for (u32 j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] / norm;
    }
}

// Op::Conv2d, NCHW cross-correlation with zero padding; one thread per output element. The
// weight is stored in `fmt` (tm_weight_at); channel co, row element r has scale co*groups+r/group.
extern "C" __global__ void tm_conv2d(const float* x, const void* w, const float* scales,
                                     const float* bias, float* y, u32 n, u32 c_in, u32 h, u32 wd,
                                     u32 c_out, u32 kh, u32 kw, u32 stride, u32 pad, u32 has_bias,
                                     u32 oh, u32 ow, u32 fmt, u32 group, u32 groups) {
    TM_GRID_STRIDE(i, (u64)n * c_out * oh * ow) {
        const u32 ox = (u32)(i % ow);
        const u32 oy = (u32)((i / ow) % oh);
        const u32 co = (u32)((i / ((u64)ow * oh)) % c_out);
        const u64 ni = i / ((u64)ow * oh * c_out);
        float acc = 0.0f;
        for (u32 ci = 0; ci < c_in; ++ci) {
            const float* xc = x + (ni * c_in + ci) * h * wd;
            const u64 inner = (u64)c_in * kh * kw;
            for (u32 ky = 0; ky < kh; ++ky) {
                const long long iy = (long long)oy * stride + ky - pad;
                if (iy < 0 || iy >= (long long)h) continue;
                for (u32 kx = 0; kx < kw; ++kx) {
                    const long long ix = (long long)ox * stride + kx - pad;
                    if (ix < 0 || ix >= (long long)wd) continue;
                    const u64 r = ((u64)ci * kh + ky) * kw + kx;
                    acc += xc[(u64)iy * wd + (u64)ix] *
                           tm_weight_at(w, scales, fmt, co * inner + r, co * groups + r / group);
                }
            }
        }
        if (has_bias) acc += bias[co];
        y[i] = acc;
    }
}

// Op::MaxPool2d, NCHW, no padding.
extern "C" __global__ void tm_maxpool2d(const float* x, float* y, u32 n, u32 c, u32 h, u32 wd,
                                        u32 k, u32 stride, u32 oh, u32 ow) {
    TM_GRID_STRIDE(i, (u64)n * c * oh * ow) {
        const u32 ox = (u32)(i % ow);
        const u32 oy = (u32)((i / ow) % oh);
        const u64 plane = i / ((u64)ow * oh);
        const float* xp = x + plane * h * wd;
        float mx = tm_neg_inf();
        for (u32 ky = 0; ky < k; ++ky)
            for (u32 kx = 0; kx < k; ++kx)
                mx = fmaxf(mx, xp[((u64)oy * stride + ky) * wd + (u64)ox * stride + kx]);
        y[i] = mx;
    }
}

// Op::Permute of a 4-D tensor. od1..od3 are output dims 1..3; s0..s3 the input stride (in
// elements) of the input axis that output axis 0..3 takes (launch.rs computes them).
extern "C" __global__ void tm_permute(const float* x, float* y, u32 len, u32 od1, u32 od2, u32 od3,
                                      u32 s0, u32 s1, u32 s2, u32 s3) {
    TM_GRID_STRIDE(i, len) {
        const u64 o3 = i % od3;
        const u64 o2 = (i / od3) % od2;
        const u64 o1 = (i / ((u64)od3 * od2)) % od1;
        const u64 o0 = i / ((u64)od3 * od2 * od1);
        y[i] = x[o0 * s0 + o1 * s1 + o2 * s2 + o3 * s3];
    }
}

// Op::Copy: 32-bit words, any dtype.
extern "C" __global__ void tm_copy(const u32* x, u32* y, u32 len) {
    TM_GRID_STRIDE(i, len) { y[i] = x[i]; }
}

// Backend::fill_zero on pinned host blocks (reached through unified addressing); device blocks
// use cuMemsetD8Async instead.
extern "C" __global__ void tm_fill_zero_bytes(unsigned char* p, u64 size) {
    TM_GRID_STRIDE(i, size) { p[i] = 0; }
}
