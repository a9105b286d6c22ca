// The bias of output channel j.
fn bias_at(j: u32) -> f32 {
    return bias[j];
}
