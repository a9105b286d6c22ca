// Paged attention without a carried state: every state starts empty.
const CARRY_IN: bool = false;

fn carry_at(i: u32) -> f32 {
    return 0.0;
}
