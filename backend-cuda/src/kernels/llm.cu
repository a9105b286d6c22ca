// tensormem decoder ops in CUDA C: appended to kernels.cu (same conventions, helpers and
// typedefs; see its header) to form the one NVRTC source.
//
// core/src/ops/host/llm.rs is the numerical reference; the WGSL kernels in core/src/ops/wgsl/
// do the same work in the same order.

// Op::RmsNorm over rows of `cols`: y = weight * (x * (1 / sqrt(mean(x^2) + eps))).
extern "C" __global__ void tm_rmsnorm(const float* x, const float* weight, float* y, u32 rows,
                                      u32 cols, float eps) {
    extern __shared__ float sh[];
    for (u32 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + (u64)r * cols;
        float* yr = y + (u64)r * cols;
        const float ms = tm_block_sum_squares(xr, cols, sh) / (float)cols;
        const float inv = 1.0f / sqrtf(ms + eps);
        for (u32 j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = weight[j] * (xr[j] * inv);
    }
}

// Op::Rope, rotate-half: element j < head_dim/2 of a head pairs with j + head_dim/2, rotated by
// position * inv_freq(j % (head_dim/2)). inv_freq is the host's f64 formula rounded to f32, so
// the f32 angle is the host's bit for bit; sinf/cosf reduce any argument accurately.
extern "C" __global__ void tm_rope(const float* x, const u32* positions, float* y, u32 tokens,
                                   u32 heads, u32 head_dim, float theta) {
    const u32 half = head_dim / 2;
    TM_GRID_STRIDE(i, (u64)tokens * heads * head_dim) {
        const u64 t = i / ((u64)heads * head_dim);
        const u32 j = (u32)(i % head_dim);
        const u32 f = j % half;
        const float inv_freq = (float)(1.0 / pow((double)theta, 2.0 * (double)f / (double)head_dim));
        const float angle = (float)positions[t] * inv_freq;
        const float c = cosf(angle), s = sinf(angle);
        y[i] = j < half ? x[i] * c - x[i + half] * s : x[i] * c + x[i - half] * s;
    }
}

// Op::SiluMul: y = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
extern "C" __global__ void tm_silu_mul(const float* gate, const float* up, float* y, u32 len) {
    TM_GRID_STRIDE(i, len) {
        const float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// IEEE binary16 bits of `v`, rounded to nearest even (ops::quant::f32_to_f16, bit for bit).
__device__ unsigned short tm_float_to_half(float v) {
    const u32 x = (u32)__float_as_int(v);
    const u32 sign = (x >> 16) & 0x8000u;
    const int ex = (int)((x >> 23) & 0xffu);
    const u32 man = x & 0x7fffffu;
    if (ex == 0xff) return (unsigned short)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    const int e = ex - 127 + 15;
    if (e >= 0x1f) return (unsigned short)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (unsigned short)sign;
        const u32 m = man | 0x800000u;
        const u32 shift = (u32)(14 - e);
        const u32 h = m >> shift;
        const u32 rem = m & ((1u << shift) - 1u);
        const u32 mid = 1u << (shift - 1u);
        return (unsigned short)(sign | (h + (rem > mid || (rem == mid && (h & 1u)) ? 1u : 0u)));
    }
    const u32 h = ((u32)e << 10) | (man >> 13);
    const u32 rem = man & 0x1fffu;
    return (unsigned short)(sign | (h + (rem > 0x1000u || (rem == 0x1000u && (h & 1u)) ? 1u : 0u)));
}

// The f32 at `p`, any alignment (an int8 scale after an int8 area of odd length).
__device__ __forceinline__ float tm_load_f32(const unsigned char* p) {
    const u32 u = (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
    return __int_as_float((int)u);
}

__device__ __forceinline__ void tm_store_f32(unsigned char* p, float v) {
    const u32 u = (u32)__float_as_int(v);
    for (u32 b = 0; b < 4; ++b) p[b] = (unsigned char)(u >> (8 * b));
}

// The int8 byte of `a` (already divided by its scale): rounded half away from zero, as Rust's
// f32::round, clamped to [-127, 127].
__device__ __forceinline__ unsigned char tm_q8(float a) {
    return (unsigned char)(signed char)(int)fminf(fmaxf(roundf(a), -127.0f), 127.0f);
}

// Element `e` of the KV block at `block`, dequantised (dtype 0 f32, 1 f16, 2 int8 * scale).
__device__ __forceinline__ float tm_kv_elem(const unsigned char* block, u64 e, u32 dtype,
                                            float scale) {
    if (dtype == 0) return ((const float*)block)[e];
    if (dtype == 1) return tm_half_to_float(((const unsigned short*)block)[e]);
    return (float)((const signed char*)block)[e] * scale;
}

// Op::KvWrite, in place. Thread (t, g) of `groups` per token: a token whose block already has an
// earlier token in the dispatch does nothing; the first token of each block writes all of that
// block's tokens in token order (duplicates and int8 requantization see the host's order), its
// `groups` threads splitting the block's (K/V, head) pairs (launch.rs passes 2 * kv_heads: byte
// stores never share a word's read-modify-write here). Slots past `blocks` are skipped.
extern "C" __global__ void tm_kv_write(const float* k, const float* v, const u32* slots,
                                       unsigned char* seg, u32 kv_heads, u32 head_dim,
                                       u32 block_tokens, u32 dtype, u32 blocks, u32 stride,
                                       u32 layer, u32 tokens, u32 groups, u32 scales_at) {
    const u32 bt = block_tokens, d = head_dim;
    TM_GRID_STRIDE(i, (u64)tokens * groups) {
        const u32 t = (u32)(i / groups);
        const u32 g = (u32)(i % groups);
        const u32 blk = slots[t] / bt;
        if (blk >= blocks) continue;
        bool leader = true;
        for (u32 u = t; u > 0; --u) {
            if (slots[u - 1] / bt == blk) {
                leader = false;
                break;
            }
        }
        if (!leader) continue;
        unsigned char* base = seg + (u64)blk * stride;
        for (u32 u = t; u < tokens; ++u) {
            const u32 slot = slots[u];
            if (slot / bt != blk) continue;
            const u32 off = slot % bt;
            for (u32 j = g; j < 2 * kv_heads; j += groups) {
                const u32 kv = j / kv_heads, head = j % kv_heads;
                const float* src = (kv == 0 ? k : v) + ((u64)u * kv_heads + head) * d;
                const u64 pair = ((u64)layer * 2 + kv) * kv_heads + head;
                const u64 first = pair * bt * d, at = first + (u64)off * d;
                if (dtype == 0) {
                    for (u32 e = 0; e < d; ++e) ((float*)base)[at + e] = src[e];
                } else if (dtype == 1) {
                    for (u32 e = 0; e < d; ++e)
                        ((unsigned short*)base)[at + e] = tm_float_to_half(src[e]);
                } else {
                    unsigned char* sp = base + scales_at + pair * 4;
                    const float old = off > 0 ? tm_load_f32(sp) : 0.0f;
                    float amax = 0.0f;
                    for (u32 e = 0; e < d; ++e) amax = fmaxf(amax, fabsf(src[e]));
                    const float scale = fmaxf(old, amax / 127.0f);
                    if (scale > old && off > 0 && old > 0.0f) {
                        // Requantize the head's earlier tokens to the larger scale.
                        for (u64 b = first; b < at; ++b)
                            base[b] = tm_q8((float)(signed char)base[b] * old / scale);
                    }
                    tm_store_f32(sp, scale);
                    for (u32 e = 0; e < d; ++e)
                        base[at + e] = scale > 0.0f ? tm_q8(src[e] / scale) : (unsigned char)0;
                }
            }
        }
    }
}

#define TM_PA_THREADS 64
#define TM_PA_NONE 0xffffffffu

// Op::PagedAttention over one segment, one block of TM_PA_THREADS threads per (token, query
// head). The online softmax runs over the token's positions in chunks of TM_PA_THREADS: thread j
// scores position c + j (a dot product in index order) when its block is in the segment, then
// every thread folds the chunk into the state (max, sum) it holds and into the accumulator
// elements it owns (e = tid, tid + 64, ...), kept in the output row (after max and sum with
// carry_out). An empty state has max -FLT_MAX (finite): exp(max - new max) is 0, never NaN.
extern "C" __global__ void tm_paged_attention(const float* q, const unsigned char* seg,
                                              const u32* tables, const u32* meta,
                                              const float* carry, float* y, u32 kv_heads,
                                              u32 head_dim, u32 block_tokens, u32 dtype,
                                              u32 blocks, u32 stride, u32 first_block, u32 layer,
                                              u32 tokens, u32 q_heads, u32 rows, u32 width,
                                              float scale, u32 carry_in, u32 carry_out,
                                              u32 scales_at) {
    __shared__ float score[TM_PA_THREADS];
    __shared__ u32 block_at[TM_PA_THREADS];
    const float empty_max = -3.40282347e38f;
    const u32 lid = threadIdx.x, d = head_dim, bt = block_tokens;
    for (u64 i = blockIdx.x; i < (u64)tokens * q_heads; i += gridDim.x) {
        const u64 t = i / q_heads;
        const u32 head = (u32)(i % q_heads) / (q_heads / kv_heads);
        const u32 row = meta[2 * t];
        const u32 n = row < rows ? meta[2 * t + 1] : 0;  // a row past the table sees nothing
        float* acc = y + (carry_out ? i * (d + 2) + 2 : i * d);
        const u64 cb = i * (d + 2);
        float m = carry_in ? carry[cb] : empty_max;
        float l = carry_in ? carry[cb + 1] : 0.0f;
        for (u32 e = lid; e < d; e += TM_PA_THREADS) acc[e] = carry_in ? carry[cb + 2 + e] : 0.0f;
        const u64 k_pair = (u64)layer * 2 * kv_heads + head;
        const u64 v_pair = k_pair + kv_heads;
        const float* qi = q + i * d;
        for (u32 c = 0; c < n; c += TM_PA_THREADS) {
            if (c / bt >= width) break;
            const u32 pos = c + lid;
            float s = empty_max;
            u32 base = TM_PA_NONE;
            if (pos < n && pos / bt < width) {
                const u32 local = tables[(u64)row * width + pos / bt] - first_block;
                if (local < blocks) {
                    base = local * stride;
                    const unsigned char* blk = seg + base;
                    const float ks = dtype == 2 ? tm_load_f32(blk + scales_at + k_pair * 4) : 0.0f;
                    const u64 ke = (k_pair * bt + pos % bt) * d;
                    float dot = 0.0f;
                    for (u32 e = 0; e < d; ++e) dot += qi[e] * tm_kv_elem(blk, ke + e, dtype, ks);
                    s = dot * scale;
                }
            }
            score[lid] = s;
            block_at[lid] = base;
            __syncthreads();
            float cm = m;
            for (u32 j = 0; j < TM_PA_THREADS; ++j)
                if (block_at[j] != TM_PA_NONE) cm = fmaxf(cm, score[j]);
            const float corr = expf(m - cm);
            __syncthreads();
            score[lid] = base != TM_PA_NONE ? expf(s - cm) : 0.0f;
            __syncthreads();
            float ws = 0.0f;
            for (u32 j = 0; j < TM_PA_THREADS; ++j) ws += score[j];
            l = l * corr + ws;
            for (u32 e = lid; e < d; e += TM_PA_THREADS) {
                float a = acc[e] * corr;
                for (u32 j = 0; j < TM_PA_THREADS; ++j) {
                    if (block_at[j] == TM_PA_NONE) continue;
                    const unsigned char* blk = seg + block_at[j];
                    const float vs = dtype == 2 ? tm_load_f32(blk + scales_at + v_pair * 4) : 0.0f;
                    const u64 ve = (v_pair * bt + (c + j) % bt) * d + e;
                    a += score[j] * tm_kv_elem(blk, ve, dtype, vs);
                }
                acc[e] = a;
            }
            m = cm;
            __syncthreads();
            if (c >= TM_PA_NONE - TM_PA_THREADS) break;
        }
        if (carry_out) {
            if (lid == 0) {
                y[cb] = m;
                y[cb + 1] = l;
            }
        } else {
            for (u32 e = lid; e < d; e += TM_PA_THREADS) acc[e] = l > 0.0f ? acc[e] / l : 0.0f;
        }
    }
}
