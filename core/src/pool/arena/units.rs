//! A set of granule indices as a bitmap with a population count: which granules of the arena
//! are committed, and which of those lie wholly in free space ([`holes`](super::holes)).
//!
//! Ranges are half-open `[a, b)` of granule indices below [`Units::len`]; every operation works a
//! word (64 granules) at a time, so marking a 64 MiB tensor over 4 KiB pages touches 256 words.

/// A bitmap of `len` granules.
#[derive(Clone, Debug, Default)]
pub(super) struct Units {
    words: Vec<u64>,
    len: u64,
    ones: u64,
}

/// The bits of word `w` that lie in `[a, b)`.
fn mask(w: u64, a: u64, b: u64) -> u64 {
    let lo = a.max(w * 64) - w * 64;
    let hi = b.min(w * 64 + 64) - w * 64;
    let top = if hi == 64 { !0 } else { (1u64 << hi) - 1 };
    top & !((1u64 << lo) - 1)
}

/// The bits set in `flipped` (not 0): a run of consecutive bits, the usual change (a whole
/// word inside a tensor's range, a partial one at its ends), is counted from its ends; only
/// scattered bits take a population count, which baseline x86-64 (no `popcnt`) computes in a
/// dozen instructions, most of the time of a free.
fn flipped_count(flipped: u64) -> u64 {
    let run = flipped >> flipped.trailing_zeros();
    if run & run.wrapping_add(1) == 0 {
        u64::from(64 - run.leading_zeros())
    } else {
        u64::from(flipped.count_ones())
    }
}

/// The words a non-empty range `[a, b)` of granules touches, and the masks of its two end words
/// (every word between is whole).
struct Span {
    first: u64,
    last: u64,
    head: u64,
    tail: u64,
}

impl Span {
    /// `None` for an empty range.
    fn new(a: u64, b: u64) -> Option<Self> {
        let (first, last) = (a / 64, b.checked_sub(1)? / 64);
        (a < b).then(|| Span {
            first,
            last,
            head: mask(first, a, b),
            tail: mask(last, a, b),
        })
    }

    /// The indices of its words.
    fn words(&self) -> std::ops::RangeInclusive<usize> {
        self.first as usize..=self.last as usize
    }

    /// The bits of its `i`th word that lie in the range.
    fn mask(&self, i: usize) -> u64 {
        if i == 0 {
            self.head
        } else if i as u64 == self.last - self.first {
            self.tail
        } else {
            !0
        }
    }
}

impl Units {
    /// Granules tracked.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Granules set.
    pub(super) fn ones(&self) -> u64 {
        self.ones
    }

    /// Tracks `len` granules: new ones are set when `value`, dropped ones are forgotten.
    pub(super) fn resize(&mut self, len: u64, value: bool) {
        let old = self.len;
        if len < old {
            self.ones -= self.count(len, old);
            self.words.truncate(len.div_ceil(64) as usize);
            if let Some(last) = self.words.last_mut() {
                if !len.is_multiple_of(64) {
                    *last &= (1u64 << (len % 64)) - 1;
                }
            }
            self.len = len;
        } else {
            self.words.resize(len.div_ceil(64) as usize, 0);
            self.len = len;
            if value {
                self.set(old, len);
            }
        }
    }

    /// Visits the words of `[a, b)`: `f(old, mask, i)` returns the new word of the `i`th word of
    /// the range, whose bits in `[a, b)` are `mask`. Returns how many granules changed. A word
    /// that did not change costs no count, one that changed in one run no population count
    /// ([`flipped_count`]): a 400 MiB tensor over 64 KiB granules is 100 words, visited on
    /// every allocation and free.
    fn update(&mut self, a: u64, b: u64, mut f: impl FnMut(u64, u64, usize) -> u64) -> u64 {
        debug_assert!(a <= b && b <= self.len, "range {a}..{b} of {}", self.len);
        let Some(span) = Span::new(a, b) else {
            return 0;
        };
        let mut changed = 0;
        for (i, word) in self.words[span.words()].iter_mut().enumerate() {
            let old = *word;
            let new = f(old, span.mask(i), i);
            let flipped = new ^ old;
            if flipped != 0 {
                changed += flipped_count(flipped);
                *word = new;
            }
        }
        changed
    }

    /// Sets `[a, b)`.
    pub(super) fn set(&mut self, a: u64, b: u64) {
        self.ones += self.update(a, b, |w, m, _| w | m);
    }

    /// Clears `[a, b)`; returns how many granules were set.
    pub(super) fn clear(&mut self, a: u64, b: u64) -> u64 {
        let cleared = self.update(a, b, |w, m, _| w & !m);
        self.ones -= cleared;
        cleared
    }

    /// Sets the granules of `[a, b)` that are set in `other` (which tracks at least `b`);
    /// returns how many were not set before.
    pub(super) fn set_where(&mut self, other: &Units, a: u64, b: u64) -> u64 {
        let words = &other.words[(a / 64) as usize..];
        let set = self.update(a, b, |old, m, i| old | (m & words[i]));
        self.ones += set;
        set
    }

    /// Granules set in `[a, b)`.
    pub(super) fn count(&self, a: u64, b: u64) -> u64 {
        let Some(span) = Span::new(a, b) else {
            return 0;
        };
        self.words[span.words()]
            .iter()
            .enumerate()
            .map(|(i, w)| u64::from((w & span.mask(i)).count_ones()))
            .sum()
    }

    /// Whether every granule of `[a, b)` is set (true for an empty range): a scan that stops
    /// at the first clear one and counts nothing.
    pub(super) fn all(&self, a: u64, b: u64) -> bool {
        let Some(span) = Span::new(a, b) else {
            return true;
        };
        self.words[span.words()]
            .iter()
            .enumerate()
            .all(|(i, w)| w & span.mask(i) == span.mask(i))
    }

    /// Whether granule `i` is set.
    pub(super) fn get(&self, i: u64) -> bool {
        i < self.len && self.words[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// The first granule at or after `from` and before `end` that is `value`.
    pub(super) fn next(&self, from: u64, end: u64, value: bool) -> Option<u64> {
        let end = end.min(self.len);
        let mut i = from;
        while i < end {
            let w = i / 64;
            let word = if value {
                self.words[w as usize]
            } else {
                !self.words[w as usize]
            } & mask(w, i, end);
            if word != 0 {
                return Some(w * 64 + u64::from(word.trailing_zeros()));
            }
            i = (w + 1) * 64;
        }
        None
    }

    /// The runs of `value` granules in `[a, b)`, as (start, end), in order.
    pub(super) fn runs(&self, a: u64, b: u64, value: bool) -> impl Iterator<Item = (u64, u64)> {
        let mut i = a;
        std::iter::from_fn(move || {
            let start = self.next(i, b, value)?;
            i = self.next(start, b, !value).unwrap_or(b);
            Some((start, i))
        })
    }
}

#[cfg(test)]
mod tests;
