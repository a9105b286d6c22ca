// Element e of an f32 weight (s, the index of its scale, is unused).
fn w_at(e: u32, s: u32) -> f32 {
    return weight[e];
}
