// Element e of an f16 weight, two per word (s, the index of its scale, is unused; see dequant.wgsl).
fn w_at(e: u32, s: u32) -> f32 {
    return f16_at(weight[e >> 1u], e);
}
