//! Learned placement: the arena with holes puts a request where the same allocation site went
//! last time, when that range is free again.
//!
//! Models run the same steps over and over, and a transformer runs the same layer dozens of
//! times per step. Placed by TLSF alone, each repetition lands a little differently, and with
//! holes the difference is paid in moved memory (probes and remaps, [`holes`](super::holes)).
//! Put back where it was, a repetition finds its granules still committed: the lifetimes the
//! previous repetition showed decide the layout, as the replay pool's plan does, without marking
//! steps and without a plan.
//!
//! * **Site.** An allocation is known by its size and alignment and the last [`HISTORY`] events
//!   of the pool (allocation and free sizes) before it: its position in a repeated sequence,
//!   whatever the period. Sites hash into a table of [`SITES`] entries; a collision only loses a
//!   hint.
//! * **Hash.** The history's part is a polynomial over the events' mixed values, kept as each
//!   event happens (one multiply-add in, one out of the window), so a request hashes only its
//!   own size and alignment on top of it.
//! * **Bucket.** The table is indexed by the history alone (the full key is checked in the
//!   entry), so each event prefetches the next request's bucket. A bucket holds the two requests
//!   last seen after its history, the latest first, so sites sharing a history do not evict
//!   each other.
//! * **Hint.** The offset the site got last time and the landmark of that region, from which
//!   TLSF finds the free block holding the offset ([`Tlsf::allocate_at`], a bounded walk). A
//!   range that is not free goes through the usual placement: a hint costs only the lookup.
//! * **First place, with whole units** ([`Sites::new`]). Where memory moves only in whole units
//!   (CUDA) a site keeps the place it got first, so a tensor that lands somewhere transient
//!   while its range is held does not drag the next step onto new units; a site whose last two
//!   uses in a row got the same other place learns that place. Per granule the last place wins.
//! * **Memory that moved** ([`Sites::follow`], whole units). Sites placed on a unit that moves
//!   learn where it went, so the next layer finds its memory committed there. A move is O(1)
//!   (logged); a lookup follows the logged moves its site has not seen.
//! * **A new run** ([`Sites::restart`]). When the pool empties, the history starts again, so the
//!   next run's first layer meets the first run's histories and their places.
//!
//! Costs: per event one multiply-add and a prefetch; per request one bucket lookup and, with a
//! hint, one bounded TLSF walk. The table is fixed-size ([`SITES`] entries). The numbers behind
//! these rules are in `docs/decisions/sites.md` and `docs/decisions/holes-hints.md`.
//!
//! [`Tlsf::allocate_at`]: crate::suballoc::Tlsf::allocate_at

use super::hints::PlacementHints;
use crate::suballoc::{Landmark, Region};

/// Events (allocations and frees) that make up a site with the request itself.
pub const HISTORY: usize = 6;

/// Entries of the table of sites (a power of two), two per bucket: 160 KiB per arena with holes.
pub const SITES: usize = 4096;

/// Buckets of the table.
const BUCKETS: usize = SITES / 2;

/// One remembered placement.
#[derive(Clone, Copy, Debug, Default)]
struct Site {
    /// The site's full hash (0: empty).
    key: u64,
    offset: u64,
    /// The landmark of the region placed there (TLSF's starting block for the walk).
    near: Landmark,
    /// Where first places are kept: the place the site's last use got instead of `offset`
    /// ([`ELSEWHERE`]: it got `offset`, or none yet). A second use in a row placed there
    /// makes it the site's place.
    missed: u64,
    /// The moves of memory ([`Sites::follow`]) the site has followed: the log's count when it
    /// was learned or last caught up.
    seen: u64,
}

/// Memory that moved: `len` bytes from `from` to `to`, where a region with landmark `near` was
/// placed.
#[derive(Clone, Copy, Debug, Default)]
struct Move {
    from: u64,
    len: u64,
    to: u64,
    near: Landmark,
}

/// Moves the log keeps (a power of two). A site more moves behind follows only the last
/// [`MOVES`]: a hint that went stale costs a lookup, never memory.
pub const MOVES: usize = 256;

/// [`Site::missed`] when the site's last use got its place.
const ELSEWHERE: u64 = u64::MAX;

/// The recent events and the placements of the sites seen.
#[derive(Debug)]
pub(super) struct Sites {
    /// The last events' mixed values ([`event`]), a ring.
    history: [u64; HISTORY],
    /// Where the next event goes in `history` (the oldest one's place).
    at: usize,
    /// The history's hash: the sum of `history`'s values, the newest times 1, the one before
    /// times [`BASE`], and so on up to `BASE^(HISTORY-1)` for the oldest (wrapping). An event
    /// takes the oldest term out and shifts the rest by one power.
    window: u64,
    /// The last site hashed since the last event, with its request (size, alignment): the
    /// hint's lookup and the learning after the placement hash once.
    hashed: Option<(u64, u64, u64)>,
    /// Whether a site keeps the place it got first rather than its last one.
    keep_first: bool,
    table: Box<[[Site; 2]]>,
    /// The last [`MOVES`] moves of memory, a ring indexed by their count.
    moves: Box<[Move]>,
    /// Moves logged since the table was made.
    moved: u64,
}

/// Fx's multiplier.
const FX: u64 = 0x517c_c1b7_2722_0a95;

/// The window's base (odd, so every power is invertible and no term can vanish).
const BASE: u64 = 0x9e37_79b9_7f4a_7c15;

/// `BASE^(HISTORY-1)`, the oldest event's weight.
const OLDEST: u64 = {
    let mut p = 1u64;
    let mut i = 1;
    while i < HISTORY {
        p = p.wrapping_mul(BASE);
        i += 1;
    }
    p
};

/// One step of the hash (Fx's multiply-rotate).
fn mix(h: u64, v: u64) -> u64 {
    (h.rotate_left(5) ^ v).wrapping_mul(FX)
}

/// An event's value in the window: `size` shifted left one bit with the low bit set for a free,
/// through murmur3's finaliser. A linear window over the raw values let two histories collide
/// wherever their differences cancel (sizes of whole MiB differ by high powers of two); mixed
/// values collide as random ones do. 0 stays 0: an empty history entry.
fn event(size: u64, freed: bool) -> u64 {
    let mut x = (size << 1) | u64::from(freed);
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl Sites {
    /// An empty table whose hints give a site's last placement back, or its first with
    /// `keep_first` (for an arena whose memory moves only in whole units, where the first place
    /// keeps a step's layout on the units it already has; per granule the first place breaks the
    /// layout's repetition with a step's period, so there the last place wins;
    /// `docs/decisions/holes-hints.md`).
    pub(super) fn new(keep_first: bool) -> Self {
        Sites {
            history: [0; HISTORY],
            at: 0,
            window: 0,
            hashed: None,
            keep_first,
            table: vec![[Site::default(); 2]; BUCKETS].into_boxed_slice(),
            moves: vec![Move::default(); MOVES].into_boxed_slice(),
            moved: 0,
        }
    }

    /// The site of a request of `size` bytes at `align` now.
    pub(super) fn key(&mut self, size: u64, align: u64) -> u64 {
        if let Some((s, a, key)) = self.hashed
            && (s, a) == (size, align)
        {
            return key;
        }
        // The request's part does not wait for the window; one multiply joins them.
        let key = (mix(mix(0, size), align) ^ self.window).wrapping_mul(FX) | 1;
        self.hashed = Some((size, align, key));
        key
    }

    /// Where `key`, a site of now ([`Sites::key`] since the last event), was placed last time
    /// (first, when the table keeps first places): offset and the region's landmark.
    pub(super) fn hint(&mut self, key: u64) -> Option<(u64, Landmark)> {
        let bucket = self.bucket();
        let s = self.table[bucket].iter_mut().find(|s| s.key == key)?;
        catch_up(s, &self.moves, self.moved);
        Some((s.offset, s.near))
    }

    /// `key`, a site of now, was placed at `region`. Where first places are kept, a site
    /// already learned keeps its offset, and only a region placed there again moves its
    /// landmark (the walk then starts from a block that exists); a site placed elsewhere twice
    /// in a row at the same place learns that place instead.
    pub(super) fn learn(&mut self, key: u64, region: &Region) {
        let bucket = self.bucket();
        let [latest, older] = &mut self.table[bucket];
        let placed = Site {
            key,
            offset: region.offset,
            near: region.landmark(),
            missed: ELSEWHERE,
            seen: self.moved,
        };
        if older.key == key {
            // The site learned latest comes first.
            std::mem::swap(latest, older);
        }
        if latest.key == key {
            catch_up(latest, &self.moves, self.moved);
        } else {
            // A new site: the other moves down, the older one goes.
            *older = *latest;
            *latest = placed;
            return;
        }
        if !self.keep_first || latest.missed == region.offset {
            // A kept place missed twice in a row for the same other one is replaced by it.
            *latest = placed;
        } else if latest.offset == region.offset {
            latest.near = placed.near;
            latest.missed = ELSEWHERE;
        } else {
            latest.missed = region.offset;
        }
    }

    /// The memory of `[from, from + len)` moved to `to` (`near`: the landmark of the region
    /// placed there): every site placed in that range learns the same place in the new one.
    /// The memory is where the next repetition finds it committed; the old range has none.
    /// Logged, and followed by each site when it is next looked up: a walk of the table per
    /// move costs a third of the allocation time on the transformer traces
    /// (`docs/decisions/sites.md`).
    pub(super) fn follow(&mut self, (from, len): (u64, u64), to: u64, near: Landmark) {
        self.moves[self.moved as usize % MOVES] = Move {
            from,
            len,
            to,
            near,
        };
        self.moved += 1;
    }

    /// Forgets the recent events (the pool emptied): the sites of a model's next run have the
    /// histories of its first.
    pub(super) fn restart(&mut self) {
        self.history = [0; HISTORY];
        self.at = 0;
        self.window = 0;
        self.hashed = None;
    }

    /// An allocation of `size` bytes (`freed`: a free of one) happened.
    pub(super) fn saw(&mut self, size: u64, freed: bool) {
        let v = event(size, freed);
        let oldest = std::mem::replace(&mut self.history[self.at], v);
        self.at = if self.at + 1 == HISTORY {
            0
        } else {
            self.at + 1
        };
        self.window = self
            .window
            .wrapping_sub(oldest.wrapping_mul(OLDEST))
            .wrapping_mul(BASE)
            .wrapping_add(v);
        self.hashed = None;
        let [latest, older] = &self.table[self.bucket()];
        // A bucket of 80 bytes spans two lines; a site's key, read first, is in the one asked for.
        prefetch(latest);
        prefetch(older);
    }

    /// The bucket of the sites of now: the history's hash, top bits.
    fn bucket(&self) -> usize {
        (self.window >> (64 - BUCKETS.trailing_zeros())) as usize
    }
}

/// `site` follows the logged moves it has not seen, in order (the last [`MOVES`] of `moved`).
#[inline]
fn catch_up(site: &mut Site, moves: &[Move], moved: u64) {
    if site.seen == moved {
        return;
    }
    for n in site.seen.max(moved.saturating_sub(MOVES as u64))..moved {
        let m = &moves[n as usize % MOVES];
        if site.offset.wrapping_sub(m.from) < m.len {
            site.offset = site.offset - m.from + m.to;
            site.near = m.near;
            site.missed = ELSEWHERE;
        }
    }
    site.seen = moved;
}

/// Asks the cache for `site`'s line without waiting for it (no effect on the program's state).
#[inline]
fn prefetch(site: &Site) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has (it is in the baseline
    // target); a prefetch reads nothing into the program and cannot fault, and the address is a
    // live reference's.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(site).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = site;
}

impl PlacementHints for Sites {
    fn hint(&mut self, size: u64, align: u64) -> Option<(u64, Landmark)> {
        let key = self.key(size, align);
        Sites::hint(self, key)
    }

    fn placed(&mut self, size: u64, align: u64, region: &Region) {
        let key = self.key(size, align);
        self.learn(key, region);
        self.saw(size, false);
    }

    fn freed(&mut self, size: u64, emptied: bool) {
        self.saw(size, true);
        if emptied {
            // The next run of the model meets the histories its first run had, and its first
            // layer the places that one learned.
            self.restart();
        }
    }

    fn moved(&mut self, range: (u64, u64), to: u64, near: Landmark) {
        self.follow(range, to, near);
    }
}

#[cfg(test)]
mod tests;
