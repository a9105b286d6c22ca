// The SwiGLU gate y = silu(gate) * up, silu(g) = g / (1 + exp(-g)). Params: [len].

// The element count is parameter word 0 (see element.wgsl).
const LEN_AT: u32 = 0u;

fn element(i: u32) {
    let g = gate[i];
    y[i] = g / (1.0 + exp(-g)) * up[i];
}
