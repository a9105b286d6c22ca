// Paged attention over one KV segment (Op::PagedAttention), one workgroup per (token, query
// head). Params: [kv_heads, head_dim, block_tokens, dtype, blocks, stride, first_block, layer,
// tokens, q_heads, rows, width, scale bits, carry_in, carry_out, scales_at].
//
// The online softmax runs over the token's positions in chunks of 64: invocation j scores
// position c + j (a dot product in index order, as the host) when its block is in the segment,
// then every invocation folds the chunk into the state (max, sum) it holds and into the
// accumulator elements it owns (e = lid, lid + 64, ...), which live in the output itself: y's
// row, or the carry row after its (max, sum). An empty state has max -f32::MAX (finite), so
// exp(max - new max) is 0 without an infinity.
const EMPTY_MAX: f32 = -3.4028234663852886e38;
const NONE: u32 = 0xffffffffu;

// Chunk scores, then their weights exp(score - new max).
var<workgroup> score: array<f32, 64>;
// Byte offset of each chunk position's block in the segment, or NONE when it is not attended.
var<workgroup> block_at: array<u32, 64>;
var<workgroup> seen_n: u32;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wid.x + wid.y * nwg.x;
    let qh = p.v[2].y;
    if (i >= p.v[2].x * qh) {
        return;
    }
    let kvh = p.v[0].x;
    let d = p.v[0].y;
    let bt = p.v[0].z;
    let dtype = p.v[0].w;
    let blocks = p.v[1].x;
    let stride = p.v[1].y;
    let first_block = p.v[1].z;
    let layer = p.v[1].w;
    let width = p.v[2].w;
    let scale = bitcast<f32>(p.v[3].x);
    let carry_out = p.v[3].z != 0u;
    let scales_at = p.v[3].w;
    let t = i / qh;
    let head = (i % qh) / (qh / kvh);
    let row = token_meta[2u * t];
    if (lid == 0u) {
        var n = token_meta[2u * t + 1u];
        if (row >= p.v[2].z) {
            n = 0u; // a row past the table sees nothing
        }
        seen_n = n;
    }
    let n = workgroupUniformLoad(&seen_n);
    var acc_at = i * d;
    if (carry_out) {
        acc_at = i * (d + 2u) + 2u;
    }
    let cb = i * (d + 2u);
    var m = EMPTY_MAX;
    var l = 0.0;
    if (CARRY_IN) {
        m = carry_at(cb);
        l = carry_at(cb + 1u);
    }
    for (var e = lid; e < d; e = e + WG) {
        var a = 0.0;
        if (CARRY_IN) {
            a = carry_at(cb + 2u + e);
        }
        y[acc_at + e] = a;
    }
    let k_pair = (layer * 2u) * kvh + head;
    let v_pair = k_pair + kvh;
    let qb = i * d;
    for (var c = 0u; c < n; c = c + WG) {
        if (c / bt >= width) {
            break;
        }
        let pos = c + lid;
        var s = EMPTY_MAX;
        var base = NONE;
        if (pos < n && pos / bt < width) {
            let local = tables[row * width + pos / bt] - first_block;
            if (local < blocks) {
                base = local * stride;
                var ks = 0.0;
                if (dtype == 2u) {
                    ks = seg_f32(base + scales_at + k_pair * 4u);
                }
                let ke = (k_pair * bt + pos % bt) * d;
                var dot = 0.0;
                for (var e = 0u; e < d; e = e + 1u) {
                    dot = dot + q[qb + e] * seg_elem(base, ke + e, dtype, ks);
                }
                s = dot * scale;
            }
        }
        score[lid] = s;
        block_at[lid] = base;
        workgroupBarrier();
        var cm = m;
        for (var j = 0u; j < WG; j = j + 1u) {
            if (block_at[j] != NONE) {
                cm = max(cm, score[j]);
            }
        }
        let corr = exp(m - cm);
        workgroupBarrier();
        var w = 0.0;
        if (base != NONE) {
            w = exp(s - cm);
        }
        score[lid] = w;
        workgroupBarrier();
        var ws = 0.0;
        for (var j = 0u; j < WG; j = j + 1u) {
            ws = ws + score[j];
        }
        l = l * corr + ws;
        for (var e = lid; e < d; e = e + WG) {
            var a = y[acc_at + e] * corr;
            for (var j = 0u; j < WG; j = j + 1u) {
                let b = block_at[j];
                if (b != NONE) {
                    var vs = 0.0;
                    if (dtype == 2u) {
                        vs = seg_f32(b + scales_at + v_pair * 4u);
                    }
                    let ve = (v_pair * bt + (c + j) % bt) * d + e;
                    a = a + score[j] * seg_elem(b, ve, dtype, vs);
                }
            }
            y[acc_at + e] = a;
        }
        m = cm;
        workgroupBarrier();
        if (c >= NONE - WG) {
            break;
        }
    }
    if (carry_out) {
        if (lid == 0u) {
            y[cb] = m;
            y[cb + 1u] = l;
        }
    } else {
        for (var e = lid; e < d; e = e + WG) {
            var a = 0.0;
            if (l > 0.0) {
                a = y[acc_at + e] / l;
            }
            y[acc_at + e] = a;
        }
    }
}
