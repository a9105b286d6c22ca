// y[i] = x[i] for any 32-bit element type (moved as u32 so NaN payloads survive). Params: [len].

// The element count is parameter word 0 (see element.wgsl).
const LEN_AT: u32 = 0u;

fn element(i: u32) {
    y[i] = x[i];
}
