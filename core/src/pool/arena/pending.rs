//! Waiting for pending frees instead of growing: when the bytes freed behind in-flight work
//! would serve a request whose growth (the request, or the arena's growth step) would take the
//! pool past its allowance (the live peak plus
//! [`ALLOWANCE_DIVISOR`](super::holes::ALLOWANCE_DIVISOR)⁻¹ of it), the pool waits for the
//! earliest ticket whose completion releases enough of them, reclaims, and places the request
//! there. The wait is for work already queued, so the device keeps running; what the host loses
//! is the lead it had over the device. Within the allowance the pool grows as before. Native
//! only: a browser cannot block, so there the pool grows.

use super::carved::{Carved, Kind, State};
use super::holes::ALLOWANCE_DIVISOR;
use crate::Result;
use crate::suballoc::Region;

impl<K: Kind> Carved<K> {
    /// After the completed frees were reclaimed and nothing fits: waits for enough pending frees
    /// where growing would pass the allowance (module doc), then places the request among the
    /// pool's blocks. `Ok(None)` when it did not wait or nothing fits after all.
    pub(super) fn after_pending_frees(
        &self,
        st: &mut State<K>,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>> {
        if cfg!(target_arch = "wasm32") || st.deferred.bytes() < size {
            return Ok(None);
        }
        // What growing would add: the request, or the arena's growth step.
        let step = K::growth_step(st, size);
        let allowance = Self::allowance(st, size, K::granule(st).trailing_zeros());
        if st.stats.reserved + step <= allowance {
            return Ok(None);
        }
        // Each round waits for the next ticket that releases `size` bytes: freed bytes in pieces
        // or in the wrong place may not hold the request, and later ones may.
        while let Some(ticket) = st.deferred.covering(size) {
            #[cfg(not(target_arch = "wasm32"))]
            Self::remember_loss(st, self.backend.wait(ticket))?;
            #[cfg(target_arch = "wasm32")]
            let _ = ticket;
            self.reclaim_locked(st)?;
            if let Some(found) = K::existing(self, st, size, align)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The bytes the pool may hold before it waits for pending frees, and before the arena
    /// moves memory instead of committing more: the live peak, this request included, plus
    /// [`ALLOWANCE_DIVISOR`]⁻¹ of it, in whole granules of `1 << shift` bytes.
    pub(super) fn allowance(st: &State<K>, size: u64, shift: u32) -> u64 {
        let s = &st.stats;
        let peak = s.peak_in_use.max(s.in_use + size);
        let g = 1u64 << shift;
        (peak + peak / ALLOWANCE_DIVISOR).div_ceil(g) * g
    }
}

#[cfg(test)]
mod tests;
