//! The reference model the sub-allocators' random traces are checked against: the set of live
//! ranges. Shared by the TLSF and buddy tests so both answer to the same rules: every region has
//! the size asked for, lies inside the range at a multiple of its alignment, and overlaps no
//! other live region; a freed region was live. Also what every sub-allocator's tests share: the
//! property tests' case count, forged handles and the refusals of impossible requests.

use std::collections::BTreeMap;

use proptest::test_runner::Config;

use super::Region;
use crate::{Error, Result};

/// The property tests' configuration: `default` cases, modest so that `cargo test` stays fast,
/// unless `PROPTEST_CASES` scales them up.
pub(super) fn cases(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Config::with_cases(cases)
}

/// A second handle to the same slot, as a buggy or malicious caller could forge one.
pub(super) fn forge(r: &Region) -> Region {
    Region {
        offset: r.offset,
        size: r.size,
        owner: r.owner,
        key: r.key,
    }
}

/// Asserts the refusals every sub-allocator makes alike, through its `new`, `allocate` and
/// `is_empty`: a zero capacity and a zero size are [`Error::ZeroSize`], one byte past a range of
/// `capacity` and `u64::MAX` are [`Error::TooLarge`], and nothing is left allocated. Returns the
/// allocator for further checks.
pub(super) fn assert_rejects_zero_and_too_large<A: std::fmt::Debug>(
    capacity: u64,
    new: fn(u64) -> Result<A>,
    allocate: fn(&mut A, u64, u64) -> Result<Option<Region>>,
    is_empty: fn(&A) -> bool,
) -> A {
    assert!(matches!(new(0), Err(Error::ZeroSize { .. })));
    let mut a = new(capacity).unwrap();
    assert!(matches!(
        allocate(&mut a, 0, 1),
        Err(Error::ZeroSize { .. })
    ));
    for size in [capacity + 1, u64::MAX] {
        assert!(
            matches!(allocate(&mut a, size, 1), Err(Error::TooLarge { .. })),
            "size {size}"
        );
    }
    assert!(is_empty(&a));
    a
}

/// Live ranges keyed by offset (offset -> end): overlap checks in O(log n).
#[derive(Debug, Default)]
pub(super) struct LiveRanges {
    ranges: BTreeMap<u64, u64>,
    /// Sum of the live sizes asked for, in bytes.
    bytes: u64,
}

impl LiveRanges {
    /// Records a region handed out for `size` bytes at `align` in a range of `capacity` bytes,
    /// or says which rule it breaks.
    pub(super) fn insert(
        &mut self,
        r: &Region,
        size: u64,
        align: u64,
        capacity: u64,
    ) -> Result<(), String> {
        if r.size != size {
            return Err(format!(
                "region of {} bytes for a request of {size}",
                r.size
            ));
        }
        if !r.offset.is_multiple_of(align) {
            return Err(format!("offset {} not a multiple of {align}", r.offset));
        }
        let end = r
            .offset
            .checked_add(r.size)
            .filter(|e| *e <= capacity)
            .ok_or_else(|| format!("[{}, +{}) outside [0, {capacity})", r.offset, r.size))?;
        if let Some((&start, _)) = self.ranges.range(r.offset..).next()
            && start < end
        {
            return Err(format!(
                "[{}, {end}) overlaps the range at {start}",
                r.offset
            ));
        }
        if let Some((_, &prev_end)) = self.ranges.range(..r.offset).next_back()
            && prev_end > r.offset
        {
            return Err(format!(
                "[{}, {end}) overlaps a range ending at {prev_end}",
                r.offset
            ));
        }
        self.ranges.insert(r.offset, end);
        self.bytes += size;
        Ok(())
    }

    /// Forgets a region about to be freed; an error if it was not live.
    pub(super) fn remove(&mut self, r: &Region) -> Result<(), String> {
        match self.ranges.remove(&r.offset) {
            Some(end) if end == r.end() => {
                self.bytes -= r.size;
                Ok(())
            }
            _ => Err(format!(
                "freeing [{}, {}), which is not live",
                r.offset,
                r.end()
            )),
        }
    }

    /// Number of live ranges.
    pub(super) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Live bytes asked for.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// End of the highest live range (0 when none).
    pub(super) fn high_water(&self) -> u64 {
        self.ranges.values().next_back().copied().unwrap_or(0)
    }
}
