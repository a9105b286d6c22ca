// Exact GELU, y = x * 0.5 * (1 + erf(x / sqrt(2))), as PyTorch computes it. Params: [len].

// The element count is parameter word 0 (see element.wgsl).
const LEN_AT: u32 = 0u;

fn element(i: u32) {
    let v = x[i];
    y[i] = v * 0.5 * (1.0 + erf_f32(v * 0.7071067811865476));
}
