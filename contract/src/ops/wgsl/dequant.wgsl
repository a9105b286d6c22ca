// Weight element readers (ops::quant): f16 is two per u32 word (element e in the low half when
// e is even), int8 four per word (byte e % 4, little-endian, sign-extended). Core WGSL only:
// unpack2x16float needs no shader-f16 feature.
fn f16_at(word: u32, e: u32) -> f32 {
    return unpack2x16float(word >> ((e & 1u) * 16u)).x;
}

fn i8_at(word: u32, e: u32) -> f32 {
    return f32(extractBits(bitcast<i32>(word), (e & 3u) * 8u, 8u));
}
