// The entry point of the one-invocation-per-element kernels: invocation i runs the kernel's
// `element(i)` for every i below the element count, parameter word `LEN_AT` (both defined by the
// kernel). Workgroups past the count do nothing, as every kernel bounds-checks.
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = element_index(wid, nwg, lid);
    if (i >= p.v[LEN_AT / 4u][LEN_AT % 4u]) {
        return;
    }
    element(i);
}
