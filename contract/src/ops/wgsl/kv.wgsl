// Reading a paged KV segment (ops::kv's block layout) bound as `seg: array<u32>`: bytes are
// little-endian within a word; a block starts on a word (its stride is a multiple of 4); f32
// elements are whole words, f16 two per word, int8 four per word. Dtype codes: 0 f32, 1 f16,
// 2 int8. An int8 scale may sit at any byte (after an int8 area of odd length).

fn seg_byte(b: u32) -> u32 {
    return (seg[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// The f32 at byte `b`.
fn seg_f32(b: u32) -> f32 {
    if ((b & 3u) == 0u) {
        return bitcast<f32>(seg[b >> 2u]);
    }
    return bitcast<f32>(seg_byte(b) | (seg_byte(b + 1u) << 8u) | (seg_byte(b + 2u) << 16u)
        | (seg_byte(b + 3u) << 24u));
}

// Element `e` of the block at byte `base`, dequantised (`scale`: its head's int8 scale).
fn seg_elem(base: u32, e: u32, dtype: u32, scale: f32) -> f32 {
    if (dtype == 0u) {
        return bitcast<f32>(seg[(base >> 2u) + e]);
    }
    if (dtype == 1u) {
        let b = base + 2u * e;
        return unpack2x16float(seg[b >> 2u] >> ((b & 2u) * 8u)).x;
    }
    let b = base + e;
    return f32(extractBits(bitcast<i32>(seg[b >> 2u]), (b & 3u) * 8u, 8u)) * scale;
}
