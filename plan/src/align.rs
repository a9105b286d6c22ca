//! Rounding offsets and sizes to a power-of-two alignment: the one helper the pools, the
//! sub-allocators, the planners and the backends share. Checked: a rounding past `u64::MAX` is
//! `None`, never a wrapped offset.

/// `value` rounded up to a multiple of `align` (a power of two); `None` on overflow.
#[inline]
pub fn align_up(value: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    let mask = align - 1;
    value.checked_add(mask).map(|v| v & !mask)
}

/// `value` rounded down to a multiple of `align` (a power of two).
#[inline]
pub fn align_down(value: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    value & !(align - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_the_alignment_and_refuses_overflow() {
        assert_eq!(align_up(0, 256), Some(0));
        assert_eq!(align_up(1, 256), Some(256));
        assert_eq!(align_up(256, 256), Some(256));
        assert_eq!(align_up(u64::MAX - 3, 4), Some(u64::MAX - 3));
        assert_eq!(align_up(u64::MAX - 2, 4), None);
        assert_eq!(align_up(u64::MAX, 1), Some(u64::MAX));
        assert_eq!(align_down(511, 256), 256);
        assert_eq!(align_down(u64::MAX, 1 << 63), 1 << 63);
    }
}
