// Shared by every kernel (prepended to each source): the uniform block and 1-D indexing.
//
// `Params` is 16 u32 at the binding after the operands; f32 parameters are stored as their bits
// and read with `bitcast<f32>`.
struct Params {
    v: array<vec4<u32>, 4>,
}

// Invocations per workgroup of the 1-D kernels.
const WG: u32 = 64u;

// Linear index of this invocation in a 1-D dispatch of WG-wide workgroups whose count spilled
// from x into y (group = wid.x + wid.y * nwg.x, at most 65535 * 65535 + 65534 < 2^32).
// Groups at or past 2^26, whose first index would not fit in u32, get 0xffffffff, which every
// kernel's `i >= len` check rejects (a u32 length is at most 0xffffffff).
fn element_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    let g = wid.x + wid.y * nwg.x;
    if (g >= 0x4000000u) {
        return 0xffffffffu;
    }
    return g * WG + lid;
}
