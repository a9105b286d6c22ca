// Writes tokens' keys and values into a KV segment, in place (Op::KvWrite). Params:
// [kv_heads, head_dim, block_tokens, dtype, blocks, stride, layer, tokens, groups, scales_at,
//  invocations = tokens * groups].
//
// Race free without atomics: the tokens of one block are written by the invocations of its
// first token in the dispatch (a later token of the same block returns at once), in token
// order, so duplicates and int8 requantization see the host's order. Those `groups`
// invocations split the block's (K/V, head) pairs: 2 * kv_heads of them when a head's elements
// fill whole words (head_dim * element bytes a multiple of 4, so no two pairs share a word),
// else one invocation takes all of them. Blocks never share a word.

fn set_byte(b: u32, val: u32) {
    let w = b >> 2u;
    let s = (b & 3u) * 8u;
    seg[w] = (seg[w] & ~(0xffu << s)) | ((val & 0xffu) << s);
}

fn set_f32(b: u32, val: f32) {
    let u = bitcast<u32>(val);
    if ((b & 3u) == 0u) {
        seg[b >> 2u] = u;
        return;
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        set_byte(b + i, u >> (8u * i));
    }
}

// IEEE binary16 bits of `val`, rounded to nearest even (ops::quant::f32_to_f16, bit for bit).
fn f32_to_f16(val: f32) -> u32 {
    let xb = bitcast<u32>(val);
    let sign = (xb >> 16u) & 0x8000u;
    let ex = i32((xb >> 23u) & 0xffu);
    let man = xb & 0x7fffffu;
    if (ex == 0xff) {
        var nan = 0u;
        if (man != 0u) {
            nan = 0x200u | (man >> 13u);
        }
        return sign | 0x7c00u | nan;
    }
    let e = ex - 127 + 15;
    if (e >= 0x1f) {
        return sign | 0x7c00u;
    }
    if (e <= 0) {
        if (e < -10) {
            return sign;
        }
        let m = man | 0x800000u;
        let shift = u32(14 - e);
        let h = m >> shift;
        let rem = m & ((1u << shift) - 1u);
        let mid = 1u << (shift - 1u);
        return sign | (h + u32(rem > mid || (rem == mid && (h & 1u) == 1u)));
    }
    let h = (u32(e) << 10u) | (man >> 13u);
    let rem = man & 0x1fffu;
    return sign | (h + u32(rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u)));
}

// round() as Rust's f32::round: half away from zero.
fn round_away(a: f32) -> f32 {
    let t = trunc(a);
    if (abs(a - t) >= 0.5) {
        return t + sign(a);
    }
    return t;
}

// The int8 byte of `a` (already divided by its scale), clamped to [-127, 127].
fn q8(a: f32) -> u32 {
    return bitcast<u32>(i32(clamp(round_away(a), -127.0, 127.0))) & 0xffu;
}

// Source element: k or v at `i`.
fn src(kv: u32, i: u32) -> f32 {
    if (kv == 0u) {
        return k[i];
    }
    return v[i];
}

// The element count is parameter word 10 (see element.wgsl).
const LEN_AT: u32 = 10u;

fn element(i: u32) {
    let kvh = p.v[0].x;
    let d = p.v[0].y;
    let bt = p.v[0].z;
    let dtype = p.v[0].w;
    let layer = p.v[1].z;
    let groups = p.v[2].x;
    let t = i / groups;
    let blk = slots[t] / bt;
    if (blk >= p.v[1].x) {
        return;
    }
    for (var u = t; u > 0u; u = u - 1u) {
        if (slots[u - 1u] / bt == blk) {
            return;
        }
    }
    let base = blk * p.v[1].y;
    for (var u = t; u < p.v[1].w; u = u + 1u) {
        let slot = slots[u];
        if (slot / bt != blk) {
            continue;
        }
        let off = slot % bt;
        for (var j = i % groups; j < 2u * kvh; j = j + groups) {
            let kv = j / kvh;
            let pair = (layer * 2u + kv) * kvh + j % kvh;
            let first = pair * bt * d;
            let at = first + off * d;
            let s0 = (u * kvh + j % kvh) * d;
            if (dtype == 0u) {
                for (var e = 0u; e < d; e = e + 1u) {
                    seg[(base >> 2u) + at + e] = bitcast<u32>(src(kv, s0 + e));
                }
            } else if (dtype == 1u) {
                for (var e = 0u; e < d; e = e + 1u) {
                    let b = base + 2u * (at + e);
                    let w = b >> 2u;
                    let s = (b & 2u) * 8u;
                    seg[w] = (seg[w] & ~(0xffffu << s)) | (f32_to_f16(src(kv, s0 + e)) << s);
                }
            } else {
                let sb = base + p.v[2].y + pair * 4u;
                var old = 0.0;
                if (off > 0u) {
                    old = seg_f32(sb);
                }
                var amax = 0.0;
                for (var e = 0u; e < d; e = e + 1u) {
                    amax = max(amax, abs(src(kv, s0 + e)));
                }
                let scale = max(old, amax / 127.0);
                if (scale > old && off > 0u && old > 0.0) {
                    // Requantize the head's earlier tokens to the larger scale.
                    for (var b = base + first; b < base + at; b = b + 1u) {
                        let q = f32(extractBits(bitcast<i32>(seg_byte(b)), 0u, 8u));
                        set_byte(b, q8(q * old / scale));
                    }
                }
                set_f32(sb, scale);
                for (var e = 0u; e < d; e = e + 1u) {
                    var q = 0u;
                    if (scale > 0.0) {
                        q = q8(src(kv, s0 + e) / scale);
                    }
                    set_byte(base + at + e, q);
                }
            }
        }
    }
}
