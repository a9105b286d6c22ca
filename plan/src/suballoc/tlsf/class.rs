//! TLSF size classes: the mapping from a size to its free list, shared by the allocator and its
//! invariant checks. Kept apart because it is pure arithmetic with its own proof obligations
//! (monotone, every class start <= its members < the next class start), tested on its own.

/// log2 of the number of second-level lists per power of two. 32 lists per power of two bound
/// the good-fit acceptance threshold at 1/32 (about 3.1 %) above the request.
pub(super) const SL_BITS: u32 = 5;
/// Second-level lists per first level.
pub(super) const SL_COUNT: usize = 1 << SL_BITS;
/// First levels: level 0 holds the sizes below `SL_COUNT` exactly (one byte per class); level
/// `f - SL_BITS + 1` holds the sizes whose highest set bit is `f`.
pub(super) const FL_COUNT: usize = 64 - SL_BITS as usize + 1;
/// Total number of size classes (free lists).
pub(super) const CLASS_COUNT: usize = FL_COUNT * SL_COUNT;
/// Length of the list-head table: the power of two above `CLASS_COUNT`, so that indexing with
/// `class & (HEADS_LEN - 1)` needs no bounds check.
pub(super) const HEADS_LEN: usize = CLASS_COUNT.next_power_of_two();

/// Round-down class of a size `>= 1`: the class whose range contains `size`.
///
/// Branch-free: with `shift = max(msb(size), SL_BITS) - SL_BITS`, the class is
/// `shift * SL_COUNT + (size >> shift)`. Sizes below `2 * SL_COUNT` map to themselves (first levels
/// 0 and 1 both have one-byte classes), larger ones to `(msb - SL_BITS + 1, next SL_BITS bits)`.
#[inline]
pub(super) fn class_of(size: u64) -> usize {
    debug_assert!(size >= 1);
    let shift = 63 - (size | SL_COUNT as u64).leading_zeros() - SL_BITS;
    shift as usize * SL_COUNT + (size >> shift) as usize
}

/// Smallest size in class `c`.
#[inline]
pub(super) fn class_start(c: usize) -> u64 {
    if c < 2 * SL_COUNT {
        c as u64
    } else {
        let shift = c / SL_COUNT - 1;
        ((c % SL_COUNT + SL_COUNT) as u64) << shift
    }
}

/// Smallest class whose every member is `>= size`; `CLASS_COUNT` when there is none.
#[inline]
pub(super) fn class_at_least(size: u64) -> usize {
    let c = class_of(size);
    if class_start(c) == size { c } else { c + 1 }
}
