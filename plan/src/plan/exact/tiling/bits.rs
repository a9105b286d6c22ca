//! Bit operations on a grid row (a little-endian array of `u64` words, one bit per unit).

/// `bits |= bits << by` over a little-endian word array (bits shifted past the end are dropped).
pub(super) fn shift_or(bits: &mut [u64], by: usize) {
    let (words, rem) = (by / 64, (by % 64) as u32);
    if words >= bits.len() {
        return;
    }
    for i in (words..bits.len()).rev() {
        let lo = bits[i - words] << rem;
        let carry = if rem > 0 && i > words {
            bits[i - words - 1] >> (64 - rem)
        } else {
            0
        };
        bits[i] |= lo | carry;
    }
}

/// The first bit at or after `from` equal to `value`, if any.
pub(super) fn next_bit(row: &[u64], from: usize, value: bool) -> Option<usize> {
    let mut w = from / 64;
    if w >= row.len() {
        return None;
    }
    let load = |w: usize| if value { row[w] } else { !row[w] };
    let mut bits = load(w) & (!0u64 << (from % 64));
    loop {
        if bits != 0 {
            return Some(w * 64 + bits.trailing_zeros() as usize);
        }
        w += 1;
        if w == row.len() {
            return None;
        }
        bits = load(w);
    }
}

/// The mask of bits `lo..hi` within word `w`.
fn mask(w: usize, lo: usize, hi: usize) -> u64 {
    let (a, b) = (lo.max(w * 64) - w * 64, hi.min(w * 64 + 64) - w * 64);
    if b >= 64 {
        !0u64 << a
    } else {
        (!0u64 << a) & !(!0u64 << b)
    }
}

/// Whether any bit in `lo..hi` is set.
pub(super) fn any_set(row: &[u64], lo: usize, hi: usize) -> bool {
    (lo / 64..hi.div_ceil(64)).any(|w| row[w] & mask(w, lo, hi) != 0)
}

/// Toggles bits `lo..hi` (placement sets clear bits, removal clears set ones).
pub(super) fn flip(row: &mut [u64], lo: usize, hi: usize) {
    for (w, word) in row
        .iter_mut()
        .enumerate()
        .take(hi.div_ceil(64))
        .skip(lo / 64)
    {
        *word ^= mask(w, lo, hi);
    }
}
