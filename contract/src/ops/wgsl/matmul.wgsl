// Batched matrix product C[b] = alpha * op(A[b]) . op(B[b]) (+ bias), tiled in workgroup memory.
//
// Each 8x8 workgroup computes one 32x32 tile of C; invocation (tx, ty) owns rows ty + 8i and
// columns tx + 8j (i, j < 4), a strided layout that keeps workgroup-memory reads conflict-free.
// The inner dimension advances 16 at a time: A's 32x16 and B's 16x32 slices are staged (zero
// outside the matrix) with loads laid out so consecutive invocations read consecutive addresses
// for either transpose. Each C element sums k in order from 0, like the host reference.
// Tiles are numbered column-tile fastest, then row-tile, then batch, and the workgroup count
// spills from x into y. Params: [batch, m, n, k, trans_a, trans_b, broadcast_b, has_bias,
// alpha bits, fmt, group, groups, tiles_n, tiles_m]. B is read through w_at, which dequantises f16 and int8 as
// the tile is staged (int8 scale of output column j, inner index p: scales[ch * groups + p /
// group] with ch = (b's matrix) * n + j).
const TS: u32 = 32u;
const TK: u32 = 16u;

// Staged slices, k-major: a_tile[kk * TS + r], b_tile[kk * TS + c].
var<workgroup> a_tile: array<f32, 512>;
var<workgroup> b_tile: array<f32, 512>;

@compute @workgroup_size(8, 8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let m = p.v[0].y;
    let n = p.v[0].z;
    let k = p.v[0].w;
    let trans_a = p.v[1].x != 0u;
    let trans_b = p.v[1].y != 0u;
    let broadcast_b = p.v[1].z != 0u;
    let alpha = bitcast<f32>(p.v[2].x);
    let tiles_n = p.v[3].x;
    let tiles_m = p.v[3].y;
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= tiles_n * tiles_m * p.v[0].x) {
        return;
    }
    let batch = tile / (tiles_n * tiles_m);
    let row0 = (tile / tiles_n) % tiles_m * TS;
    let col0 = tile % tiles_n * TS;
    let a_base = batch * m * k;
    var b_mat = batch;
    if (broadcast_b) {
        b_mat = 0u;
    }
    let b_base = b_mat * k * n;
    let group = p.v[2].z;
    let groups = p.v[2].w;
    let tx = lid3.x;
    let ty = lid3.y;
    var acc: array<array<f32, 4>, 4>;
    for (var i = 0u; i < 4u; i = i + 1u) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            acc[i][j] = 0.0;
        }
    }
    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        for (var e = 0u; e < 8u; e = e + 1u) {
            let idx = lid + e * 64u;
            // A is [m, k] (consecutive k adjacent) or, transposed, [k, m] (consecutive rows).
            var r = idx / TK;
            var kk = idx % TK;
            if (trans_a) {
                r = idx % TS;
                kk = idx / TS;
            }
            let gr = row0 + r;
            let gk = k0 + kk;
            var v = 0.0;
            if (gr < m && gk < k) {
                if (trans_a) {
                    v = a[a_base + gk * m + gr];
                } else {
                    v = a[a_base + gr * k + gk];
                }
            }
            a_tile[kk * TS + r] = v;
            // B is [k, n] (consecutive columns adjacent) or, transposed, [n, k].
            var col = idx % TS;
            var kb = idx / TS;
            if (trans_b) {
                col = idx / TK;
                kb = idx % TK;
            }
            let gc = col0 + col;
            let gkb = k0 + kb;
            var w = 0.0;
            if (gc < n && gkb < k) {
                var e = b_base + gkb * n + gc;
                if (trans_b) {
                    e = b_base + gc * k + gkb;
                }
                w = w_at(e, (b_mat * n + gc) * groups + gkb / group);
            }
            b_tile[kb * TS + col] = w;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var i = 0u; i < 4u; i = i + 1u) {
                av[i] = a_tile[kk * TS + ty + 8u * i];
                bv[i] = b_tile[kk * TS + tx + 8u * i];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i][j] = acc[i][j] + av[i] * bv[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let r = row0 + ty + 8u * i;
        for (var j = 0u; j < 4u; j = j + 1u) {
            let cc = col0 + tx + 8u * j;
            if (r < m && cc < n) {
                c[(batch * m + r) * n + cc] = alpha * acc[i][j] + bias_at(cc);
            }
        }
    }
}
