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
/// (every word between is whole). A range inside one word has one mask, `head`, and `tail` is
/// unused: the usual range (a tensor of a few granules) then costs one masked word and no loop.
struct Span {
    first: usize,
    last: usize,
    head: u64,
    tail: u64,
}

impl Span {
    /// `None` for an empty range.
    #[inline]
    fn new(a: u64, b: u64) -> Option<Self> {
        if a >= b {
            return None;
        }
        let (first, last) = ((a / 64) as usize, ((b - 1) / 64) as usize);
        let (head, tail) = (!0u64 << (a % 64), !0u64 >> (63 - (b - 1) % 64));
        Some(Span {
            first,
            last,
            head: if first == last { head & tail } else { head },
            tail,
        })
    }
}

/// Writes `new` into `word`; returns how many of its bits changed ([`flipped_count`]; a word
/// that did not change costs no count and no store).
#[inline]
fn replace(word: &mut u64, new: u64) -> u64 {
    let flipped = new ^ *word;
    if flipped == 0 {
        return 0;
    }
    *word = new;
    flipped_count(flipped)
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
            if let Some(last) = self.words.last_mut()
                && !len.is_multiple_of(64)
            {
                *last &= (1u64 << (len % 64)) - 1;
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
    /// the range, whose bits in `[a, b)` are `mask`. Returns how many granules changed. The end
    /// words are masked and the words between are whole, with no test per word; a word that did
    /// not change costs no count, one that changed in one run no population count
    /// ([`flipped_count`]): a 400 MiB tensor over 64 KiB granules is 100 words, visited on
    /// every allocation and free.
    #[inline]
    fn update(&mut self, a: u64, b: u64, mut f: impl FnMut(u64, u64, usize) -> u64) -> u64 {
        debug_assert!(a <= b && b <= self.len, "range {a}..{b} of {}", self.len);
        let Some(span) = Span::new(a, b) else {
            return 0;
        };
        let words = &mut self.words[span.first..=span.last];
        let Some((last, rest)) = words.split_last_mut() else {
            return 0;
        };
        let Some((first, middle)) = rest.split_first_mut() else {
            // One word: `head` is its mask.
            return replace(last, f(*last, span.head, 0));
        };
        let mut changed = replace(first, f(*first, span.head, 0));
        for (i, word) in middle.iter_mut().enumerate() {
            changed += replace(word, f(*word, !0, i + 1));
        }
        changed + replace(last, f(*last, span.tail, span.last - span.first))
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
        self.fold(a, b, 0, |n, w, m| n + u64::from((w & m).count_ones()))
    }

    /// Whether every granule of `[a, b)` is set (true for an empty range): a scan that stops
    /// at the first clear one and counts nothing.
    pub(super) fn all(&self, a: u64, b: u64) -> bool {
        let Some(span) = Span::new(a, b) else {
            return true;
        };
        let words = &self.words[span.first..=span.last];
        let Some((last, rest)) = words.split_last() else {
            return true;
        };
        let Some((first, middle)) = rest.split_first() else {
            return last & span.head == span.head;
        };
        first & span.head == span.head
            && middle.iter().all(|w| *w == !0)
            && last & span.tail == span.tail
    }

    /// Folds `f(acc, word, mask)` over the words of `[a, b)`, each with the mask of its bits in
    /// the range.
    #[inline]
    fn fold<T>(&self, a: u64, b: u64, init: T, mut f: impl FnMut(T, u64, u64) -> T) -> T {
        let Some(span) = Span::new(a, b) else {
            return init;
        };
        let words = &self.words[span.first..=span.last];
        let Some((last, rest)) = words.split_last() else {
            return init;
        };
        let Some((first, middle)) = rest.split_first() else {
            return f(init, *last, span.head);
        };
        let acc = f(init, *first, span.head);
        let acc = middle.iter().fold(acc, |acc, w| f(acc, *w, !0));
        f(acc, *last, span.tail)
    }

    /// Whether granule `i` is set.
    pub(super) fn get(&self, i: u64) -> bool {
        i < self.len && self.words[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// The first granule at or after `from` and before `end` that is `value`. The words
    /// between the range's ends are tested whole, with no mask: a search through the free
    /// space around a 1 GiB tensor over 64 KiB granules is 256 words.
    pub(super) fn next(&self, from: u64, end: u64, value: bool) -> Option<u64> {
        let span = Span::new(from, end.min(self.len))?;
        // Searching for clear granules is searching the inverted words for set ones.
        let flip = if value { 0 } else { !0 };
        let at = |w: usize, bits: u64| {
            (bits != 0).then(|| w as u64 * 64 + u64::from(bits.trailing_zeros()))
        };
        let words = &self.words[span.first..=span.last];
        let (last, rest) = words.split_last()?;
        let Some((first, middle)) = rest.split_first() else {
            return at(span.first, (last ^ flip) & span.head);
        };
        at(span.first, (first ^ flip) & span.head)
            .or_else(|| {
                let k = middle.iter().position(|w| w ^ flip != 0)?;
                at(span.first + 1 + k, middle[k] ^ flip)
            })
            .or_else(|| at(span.last, (last ^ flip) & span.tail))
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
