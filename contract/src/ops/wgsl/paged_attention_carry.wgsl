// Paged attention continuing a carried state, read from the `carry` operand.
const CARRY_IN: bool = true;

fn carry_at(i: u32) -> f32 {
    return carry[i];
}
