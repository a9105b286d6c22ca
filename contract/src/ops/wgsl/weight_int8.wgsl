// Element e of an int8 weight, four per word, times its scale s (see dequant.wgsl).
fn w_at(e: u32, s: u32) -> f32 {
    return i8_at(weight[e >> 2u], e) * scales[s];
}
