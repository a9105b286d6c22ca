// Softmax with a mask [rows / rows_per_mask, cols]: a column is kept when its mask value is
// non-zero.
fn keep(row: u32, j: u32) -> bool {
    return mask[(row / p.v[0].w) * p.v[0].y + j] != 0.0;
}
