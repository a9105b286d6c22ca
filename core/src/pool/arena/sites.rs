//! Learned placement: the arena with holes puts a request where the same allocation site went
//! last time, when that range is free again.
//!
//! Models run the same steps over and over (a training step, a prefill, an inference), and a
//! transformer runs the same layer dozens of times per step. Placed by TLSF alone, each
//! repetition lands a little differently, and with holes the difference is paid in moved
//! memory: on Llama-8B prefill three allocations in four fell on granules whose memory had
//! been given to another hole, each probed up to [`PROBES`](super::holes) more places and
//! remapped. Put back where it was, a repetition finds its granules still committed (they
//! held the same tensors last time), so it costs no probe and no remap: the lifetimes the
//! previous repetition showed decide the layout, as the replay pool's plan does, without
//! marking steps and without a plan.
//!
//! * **Site.** An allocation is known by its size and alignment and the last [`HISTORY`] events
//!   of the pool (allocation and free sizes) before it: the position in a repeated sequence,
//!   whatever its period (a layer or a whole step). Sites are hashed into a direct-mapped table
//!   of [`SITES`] entries; a collision only loses a hint.
//! * **Hint.** The offset the site got last time, and the landmark of that region, from whose block
//!   TLSF looks for the free block holding the offset ([`Tlsf::allocate_at`], a bounded walk).
//!   A range that is not free, or lacks memory where TLSF's own choice would not, goes through
//!   the usual placement: a hint never costs memory, only the lookup.
//! * **First place, with whole units.** Where memory moves only in whole units (CUDA), a site
//!   keeps the place it got first ([`Sites::new`]): while a step's layout settles, a tensor
//!   whose learned range is still held lands somewhere transient, and learning that place made
//!   the next step follow it, a layout that drifted onto new units. Per granule the last place
//!   wins: there the first place broke the layout's repetition with a step's period.
//!
//! [`Tlsf::allocate_at`]: crate::suballoc::Tlsf::allocate_at

use crate::suballoc::{Landmark, Region};

/// Events (allocations and frees) that make up a site with the request itself.
pub const HISTORY: usize = 6;

/// Entries of the table of sites (a power of two): 96 KiB per arena with holes.
pub const SITES: usize = 4096;

/// One remembered placement.
#[derive(Clone, Copy, Debug, Default)]
struct Site {
    /// The site's full hash (0: empty).
    key: u64,
    offset: u64,
    /// The landmark of the region placed there (TLSF's starting block for the walk).
    near: Landmark,
}

/// The recent events and the placements of the sites seen.
#[derive(Debug)]
pub(super) struct Sites {
    /// The last events, a ring: sizes, shifted left one bit, frees with the low bit set.
    history: [u64; HISTORY],
    /// Where the next event goes in `history`.
    at: usize,
    /// The last site hashed since the last event, with its request (size, alignment): the
    /// hint's lookup and the learning after the placement hash once.
    hashed: Option<(u64, u64, u64)>,
    /// Whether a site keeps the place it got first rather than its last one.
    keep_first: bool,
    table: Box<[Site]>,
}

/// One step of the hash (Fx's multiply-rotate).
fn mix(h: u64, v: u64) -> u64 {
    (h.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95)
}

impl Sites {
    /// An empty table whose hints give a site's last placement back, or its first with
    /// `keep_first` (for an arena whose memory moves only in whole units). Measured in the
    /// `pool_traces` bench's CUDA model at 2 MiB, first against last: GPT-2 training 1.008 ×
    /// live at 30 creations against 1.112 at 43, the other traces unchanged; per granule
    /// (64 KiB, the host) the layout no longer repeated with a step's period (unmaps on Llama
    /// prefill 18 to 1695), so there the last place stays.
    pub(super) fn new(keep_first: bool) -> Self {
        Sites {
            history: [0; HISTORY],
            at: 0,
            hashed: None,
            keep_first,
            table: vec![Site::default(); SITES].into_boxed_slice(),
        }
    }

    /// The site of a request of `size` bytes at `align` now.
    pub(super) fn key(&mut self, size: u64, align: u64) -> u64 {
        if let Some((s, a, key)) = self.hashed {
            if (s, a) == (size, align) {
                return key;
            }
        }
        // Oldest first: the ring from `at` on, then its start (no index arithmetic per event).
        let (newer, older) = self.history.split_at(self.at);
        let key = older
            .iter()
            .chain(newer)
            .fold(mix(mix(0, size), align), |h, v| mix(h, *v))
            | 1;
        self.hashed = Some((size, align, key));
        key
    }

    /// Where `key` was placed last time (first, when the table keeps first places): offset and
    /// the region's landmark.
    pub(super) fn hint(&self, key: u64) -> Option<(u64, Landmark)> {
        let s = &self.table[Self::slot(key)];
        (s.key == key).then_some((s.offset, s.near))
    }

    /// `key` was placed at `region`. Where first places are kept, a site already learned keeps
    /// its offset, and only a region placed there again moves its landmark (the walk then
    /// starts from a block that exists).
    pub(super) fn learn(&mut self, key: u64, region: &Region) {
        let site = &mut self.table[Self::slot(key)];
        if !self.keep_first || site.key != key {
            *site = Site {
                key,
                offset: region.offset,
                near: region.landmark(),
            };
        } else if site.offset == region.offset {
            site.near = region.landmark();
        }
    }

    /// An allocation of `size` bytes (`freed`: a free of one) happened.
    pub(super) fn saw(&mut self, size: u64, freed: bool) {
        self.history[self.at] = (size << 1) | u64::from(freed);
        self.at = (self.at + 1) % HISTORY;
        self.hashed = None;
    }

    fn slot(key: u64) -> usize {
        (key >> (64 - SITES.trailing_zeros())) as usize
    }
}

#[cfg(test)]
mod tests;
