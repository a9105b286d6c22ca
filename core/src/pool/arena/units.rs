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

    /// Visits the words of `[a, b)` with their masks; `f` returns the new word. Returns how
    /// many granules changed.
    fn update(&mut self, a: u64, b: u64, mut f: impl FnMut(u64, u64) -> u64) -> u64 {
        debug_assert!(a <= b && b <= self.len, "range {a}..{b} of {}", self.len);
        if a >= b {
            return 0;
        }
        let mut changed = 0;
        for w in a / 64..=(b - 1) / 64 {
            let m = mask(w, a, b);
            let old = self.words[w as usize];
            let new = f(old, m);
            let (up, down) = ((new & !old).count_ones(), (old & !new).count_ones());
            self.ones = self.ones + u64::from(up) - u64::from(down);
            changed += u64::from(up + down);
            self.words[w as usize] = new;
        }
        changed
    }

    /// Sets `[a, b)`.
    pub(super) fn set(&mut self, a: u64, b: u64) {
        self.update(a, b, |w, m| w | m);
    }

    /// Clears `[a, b)`; returns how many granules were set.
    pub(super) fn clear(&mut self, a: u64, b: u64) -> u64 {
        self.update(a, b, |w, m| w & !m)
    }

    /// Sets the granules of `[a, b)` that are set in `other` (which tracks at least `b`);
    /// returns how many were not set before.
    pub(super) fn set_where(&mut self, other: &Units, a: u64, b: u64) -> u64 {
        let words = &other.words;
        let mut w = a / 64;
        self.update(a, b, |old, m| {
            let new = old | (m & words[w as usize]);
            w += 1;
            new
        })
    }

    /// Granules set in `[a, b)`.
    pub(super) fn count(&self, a: u64, b: u64) -> u64 {
        if a >= b {
            return 0;
        }
        (a / 64..=(b - 1) / 64)
            .map(|w| u64::from((self.words[w as usize] & mask(w, a, b)).count_ones()))
            .sum()
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

    /// The runs of `value` granules in `[a, b)`, as (start, end).
    pub(super) fn runs(&self, a: u64, b: u64, value: bool) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut i = a;
        while let Some(start) = self.next(i, b, value) {
            let end = self.next(start, b, !value).unwrap_or(b);
            out.push((start, end));
            i = end;
        }
        out
    }
}

#[cfg(test)]
mod tests;
