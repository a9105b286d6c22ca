// The entry point of the one-workgroup-per-row kernels: workgroup `row` (numbered as the 1-D
// kernels' groups) runs the kernel's `per_row(row, base, cols, lid)` over the `cols` elements from
// `base` when `row` is below the row count. Params: [rows, cols, ...]. The row is computed and
// checked here, in the entry point, so the uniformity analysis sees every invocation of a
// workgroup reach the reductions together.
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    let cols = p.v[0].y;
    if (row >= p.v[0].x) {
        return;
    }
    per_row(row, row * cols, cols, lid);
}
