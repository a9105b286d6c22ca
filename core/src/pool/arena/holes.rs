//! Committed memory that follows the live bytes: the arena that grows in place gives the memory
//! of its free holes back and moves it where tensors need it, on a backend with
//! [`InPlaceGrowth::holes`] (the host through `madvise`, CUDA by remapping its physical
//! allocations).
//!
//! Placing tensors before their lifetimes are known strands free holes inside the arena (the
//! analysis in [`in_place`](super::in_place)): exact best fit peaks at 1.16–1.39× the live bytes
//! on the issue 14 traces. Address space costs nothing, so the holes can stay where they are
//! while their memory does not:
//!
//! * **Spare granules.** A committed granule that lies wholly in free space is *spare*. The pool
//!   tracks them as it frees (the merged free block's whole granules) and allocates (the
//!   granules a region touches), a word of 64 granules at a time.
//! * **Moved, not re-created.** A region placed on decommitted granules gets the memory of spare
//!   granules elsewhere ([`Growable::remap_range`]: no new memory, CUDA maps the same physical
//!   allocations there), and new memory only when no granule is spare
//!   ([`Growable::commit_range`]). So committed memory grows only when every committed granule
//!   holds live bytes.
//! * **Given back under pressure only.** Before the arena grows at its end, spare granules
//!   below its free tail are decommitted, as many as the growth adds ([`Growable::decommit_range`]),
//!   and trim and the runtime's pressure path decommit all of them (PyTorch's expandable segments
//!   release cached memory before an out-of-memory likewise). A free alone never calls the
//!   backend: holes that are filled again soon cost nothing. With whole units the growth is
//!   extended without memory instead and takes the spare units
//!   ([`in_place`](super::in_place)): a unit given back there had to be created again.
//!
//! Committed bytes (the pool's `reserved`) are then the granules that hold live bytes at their
//! peak, plus the growth step's slack. The granule is the backend's: 4 KiB pages on the host,
//! 2 MiB on CUDA, where a small pool's tensors share granules and the gain is small.
//!
//! # What it costs (`core/benches/pool_traces`, release)
//! * **Time.** The bookkeeping is a word of 64 granules at a time, and a free touches only the
//!   words of its own region. What is left over the pool without holes is the moves: placed by
//!   TLSF alone, three allocations in four of Llama-8B prefill at 2 MiB landed on given-back
//!   granules and were probed up to [`PROBES`] more places and remapped (1.04–1.10× cubecl's
//!   time, 1.57× at 64 KiB). Learned placement ([`sites`](super::sites)) puts a repeated step
//!   back where it went, on granules still committed: 149 mappings instead of 6250, time per
//!   pair ÷ cubecl's 0.02 / 0.72 / 0.38 / 0.71 / 0.69 on the five traces at 2 MiB and 0.04 /
//!   0.81 / 0.62 / 0.95 / 0.76 at 64 KiB (load ~9; `pool_traces` prints both rows).
//! * **Physical allocations on CUDA.** `cuMemMap` maps a physical allocation from its offset 0
//!   and `cuMemUnmap` takes whole mappings, so per granule every granule would be its own
//!   `cuMemCreate`. Such a backend gives memory back and moves it in whole units
//!   ([`InPlaceGrowth::whole_units`], [`handles`](super::handles)): one allocation per call
//!   that backs memory. At 2 MiB in the bench's CUDA model (peak ÷ live at creations; per
//!   granule, then cubecl's, in brackets): `rand_logu` 1.141 at 126 (1.031 at 6016; 1.275 at
//!   201), `xfmr_eager` 1.143 at 57 (1.036 at 169; 1.554 at 48), `gpt2s_train` 1.008 at 30
//!   (1.031 at 3514; 1.018 at 36), `llama8b_prefill` 1.109 at 10 (1.033 at 116; 1.239 at 8),
//!   `mobilenet_v2` 1.045 at 3 (1.045 at 3; 3.483 at 5); time per pair ÷ cubecl's 0.03 / 1.61
//!   / 0.63 / 1.70 / 0.96 (load ~6). That time was the units' bookkeeping, a set update on
//!   every allocation and free that changed a unit's state: with a flag per unit and the set
//!   updated lazily ([`handles`](super::handles)) `xfmr_eager` takes 0.99–1.04 and
//!   `llama8b_prefill` 0.92–1.10 of cubecl's time, against 1.60–1.61 and 1.65–1.72 before in
//!   the same runs (15 rounds, load 8). With a cell per granule naming its unit (no ordered
//!   map) and bitmap ranges as a head word, whole words and a tail word, the holes row's time ÷
//!   cubecl's is 0.84–0.88 on `xfmr_eager` and 0.89–0.95 on `llama8b_prefill` at 2 MiB, 0.86–0.90
//!   and 0.74–0.93 at 64 KiB, below 1 on every trace (2–6 alternated rounds, load 3–7).
//!   Units cut creations 12–80×, but a unit a live tensor
//!   touches keeps all its memory, and a run no spare unit fits gets new memory while larger
//!   spare units stay idle: GPT-2 and MobileNet are within 1.05 of the live peak with fewer
//!   creations than cubecl (GPT-2 since a site keeps its first place, below), `rand_logu`,
//!   `xfmr_eager` and `llama8b_prefill` are not; `rand_logu` repeats nothing, so no hint
//!   policy moves it. Since learned placement, growths extended without memory
//!   and sites that follow moved memory (below, [`in_place`](super::in_place),
//!   [`sites`](super::sites)), holes peak at or below the arena without them on every trace,
//!   and CUDA offers them by default (`CudaDesc::vmm_holes`).
//! * **Spare units before new memory** (whole units only). Where the memory a request lacks
//!   would take the pool past its allowance and its own peak, the request goes to the
//!   smallest spare unit that holds it instead (`in_spare_unit`), and a run that still needs
//!   new memory first gives the smallest spare unit back (every smaller one was moved into the
//!   run already). `xfmr_eager` at 2 MiB 1.143 at 57 creations → 1.104 at 47, its replay row
//!   1.114 at 123 → 1.114 at 114; `rand_logu` 1.141 at 126 → 1.140 at 127 (144 maps against
//!   133); GPT-2, Llama and MobileNet unchanged, every 64 KiB row identical; time ÷ cubecl's
//!   0.66–0.68 on `xfmr_eager` against 0.64–0.65 (2 alternated rounds of 30 replays, load
//!   1–3). The peak is the gate: without it (past the allowance alone) `xfmr_eager` peaks at
//!   1.172 at 63, and its replay row at 1.181 at 114: the replay pool's dynamic pool, trimmed
//!   and growing again from nothing at a step no plan takes, is past its allowance far below
//!   its old peak, and its small tensors took the spare units the step's large ones needed
//!   next. Either half alone does worse on `xfmr_eager`: the place alone 1.162 at 27
//!   creations, the give-back alone 1.162 at 46 (Llama 1.174 at 25). Placed by TLSF alone
//!   (the bench's second row) Llama goes from 1.109 at 10 to 1.174 at 16; learned placement
//!   keeps it at 1.109.
//! * **Free parts of held units** (whole units). Where no spare unit holds such a request, it
//!   goes to the first run of spare granules long enough (`spare_run_places`), committed
//!   memory in a unit a live tensor holds. Llama-8B prefill at 2 MiB peaked at its second
//!   layer's 4 MiB `kr`, given a unit of its own while the two 56 MiB units of the first
//!   layer's feed-forward part each held one 4 MiB tensor (`k`, `v`): 1.109 at 10 creations →
//!   1.087 at 10; its replay row 1.109 at 11 → 1.087 at 10, placed by TLSF alone 1.174 at 16
//!   → 1.152 at 18; `xfmr_eager`'s replay row 1.114 at 114 → 1.114 at 111; every other row
//!   unchanged, every 64 KiB row identical. It costs Llama time: ÷ cubecl's 0.64–0.66 →
//!   0.77–0.79 (TLSF alone 0.61–0.62 → 0.92–0.95; 30 replays, 2 alternated rounds, load
//!   4–6). Instrumented, the cost was not `kr`'s alone: the later runs are laid out 8
//!   granules off the first (their first layer, after another history, had no hints), so the
//!   first places kept ([`sites`](super::sites)) failed in every layer, for the three
//!   feed-forward tensors, `kr` and the residual, and `o`'s and `r1`'s lay on given-back
//!   granules (probed): 2661 of 4820 placements missed their hint, 1527 probed. A site whose
//!   last two uses got the same other place learns it: 43 missed, 36 probed, ÷ cubecl's
//!   0.85–0.89 → 0.71 (3 alternated rounds of 30 replays, load 5–6; 0.84–0.86 → 0.71–0.72 at
//!   load 1), every row's peaks, creations and maps unchanged, the 64 KiB rows' times too.
//!   Learned on one miss, GPT-2 1.073 at 37 and Llama 1.152 at 11; on two misses at any
//!   places GPT-2 1.042 at 33. Llama's peak is then the first layer's `swiglu` (100 granules
//!   for 92 live): it grows the arena, and the growth gives back only spare units up to what
//!   it takes past the allowance, so of two spare 8-granule units (`o`'s, and `n2`'s, just
//!   freed) one stays; the later layers' layout (first places kept) keeps that unit for their
//!   attention part and `n2`, idle at every feed-forward peak. Giving back both at that
//!   growth (the smallest spare unit past what it takes) peaks at 92 there, but the second
//!   layer, placed anew, then made 7 more units: 1.152 at 17; with the relearned places the
//!   same (the smallest spare unit below the tail given back while the growth is still past
//!   its allowance): 1.152 at 17, replay 1.152 at 16, the other holes rows unchanged (TLSF
//!   alone, `xfmr_eager` 1.133 at 61 → 1.114 at 47). Llama's tenth creation is iteration 1's
//!   `swiglu` growing the arena by 8 granules: `o`'s unit, given back at the first `swiglu`,
//!   leaves the first layer's places (`n1` at granule 8) on decommitted granules, and the next
//!   runs' first layers land 8 granules up. Tried, no gain: the give-back's spare unit taken
//!   lowest among equal sizes (not highest), Llama 1.152 at 11 (`xfmr_eager` 1.104 at 48); the
//!   sites' history restarted when the pool empties (the next run's first layer finds the
//!   first run's hints), 1.152 at 11; with it, a hinted place on decommitted granules not
//!   probed, 1.087 at 10 (`n1` still goes to the smallest spare unit, 8 granules up;
//!   `xfmr_eager` 1.133 at 46); and backed by a moved unit instead of that (skipping
//!   `in_spare_unit`), 1.087 at 15 with 656 maps, `xfmr_eager` 1.162 at 38 (2 MiB, load 3).
//!   For the peak, no gain either: `in_spare_unit` past the peak alone, past the allowance
//!   alone, or always, Llama 1.087 at 10 each (`xfmr_eager` 1.104 at 47, 1.181 at 54, 1.249
//!   at 48); the growth giving back smallest spare units until within its allowance, 1.152 at
//!   18 (`xfmr_eager` 1.143 at 54), with `in_spare_unit` always 1.152 at 14 (1.143 at 49).
//! * **The frontier of whole units** (same bench at 2 MiB, load 8–10; peak ÷ live and creations
//!   on `rand_logu` / `xfmr_eager` / `gpt2s_train` / `llama8b_prefill`, MobileNet 1.045 at 3
//!   throughout). Units capped at the committed size ÷ c (growths and commits split into
//!   pieces): c = 4: 1.149 / 1.162 / 1.112 / 1.109 at 140 / 69 / 64 / 19; c = 16: 1.148 /
//!   1.152 / 1.210 / 1.087 at 179 / 97 / 203 / 53; c = 32: 1.172 / 1.036 / 1.128 / 1.087 at
//!   330 / 134 / 258 / 82. A spare unit larger than a run backing it, its other granules over
//!   the decommitted free space around the run: as the last resort before new memory, GPT-2
//!   1.093 at 33 but `xfmr_eager` 1.375 at 47; tried first, `xfmr_eager` 1.365 at 43; only
//!   when the unit exceeds the run by at most a half (to an eighth) of it, no change on any
//!   trace. Smaller units raise creations far faster than they lower peaks: what holds the
//!   peak is where tensors fall across units (learned placement and the growth steps), not
//!   the units' size — GPT-2 placed by TLSF alone peaks at 1.040 on the same units.
//!   Tensor-aligned growth (same bench, load 8–9; peak ÷ live and creations on `rand_logu` /
//!   `xfmr_eager`, the other three unchanged at 1.112 / 43, 1.109 / 10, 1.045 / 3): each growth
//!   cut at the end of the request it was made for (the request's unit comes free whole when
//!   the tensor dies; the growth step's slack is a unit of its own): 1.147 at 233, 1.240 at 50;
//!   only for requests of a granule or more: 1.174 at 248, 1.240 at 50; no growth step (each
//!   growth exactly the request's part past the end): 1.125 at 624, 1.201 at 62; both: as no
//!   step. The units of growths are not what keeps GPT-2 and Llama above 1.05 (neither cut
//!   moves them), and on the other two the cuts raise peaks and creations alike. Two more did
//!   not help: a hint dropped when it lands on decommitted granules (no change on any trace); a
//!   spare unit larger than asked given back before a growth when none fits (Llama 1.239 at 22,
//!   the rest unchanged). TLSF's own place first, the hint only where that lacks memory: GPT-2
//!   1.040 at 31 (cubecl: 36), but `xfmr_eager` 1.162 at 66 and MobileNet 1.393 at 4, as
//!   placement by TLSF alone; the hint helps those two and hurts GPT-2. On GPT-2 the
//!   committed peak came in the third step (event ~1660 of 7380), long after the live peak
//!   in the first (~210): new units came while the learned layout settled, each site
//!   following the transient place it got while its own was held. A site that keeps its
//!   first place ([`sites`](super::sites); the landmark follows it) takes GPT-2 to 1.008 at
//!   30 creations, 0 unmaps (cubecl: 1.018 at 36), the rest unchanged at 2 MiB; per granule
//!   (64 KiB) the layout then no longer repeats with a step's period (unmaps on Llama 18 to
//!   1695, MobileNet 15 to 201, `xfmr_eager` 597 to 744; the host layer test of `sites` moves
//!   more than TLSF alone, 218 holes calls against 199). So first places are kept with whole
//!   units only: the 2 MiB CUDA rows above, and every 64 KiB row identical to the last place's
//!   (load 10–11). Tried with it or alone (load 9–11), no gain: the hint taken only
//!   where its free block is no larger than the one TLSF would split (`xfmr_eager` 1.327 at
//!   54, GPT-2 1.098 at 46 alone; with the first place kept `xfmr_eager` 1.201 at 71); the
//!   same, and the hint tried where TLSF's place lacks memory (GPT-2 1.098 at 46, the rest
//!   unchanged).
//! * **Small tensors apart** (same bench at 2 MiB, 1 replay; peak ÷ live at creations). On
//!   `rand_logu` small tensors pin units: seven allocations in ten are under 2 MiB, with
//!   lifetimes as long as the large ones'. Requests up to 64 KiB / 1 MiB served by a second
//!   pool with holes on the same device: `rand_logu` 1.140 at 127 → 1.115 at 135 / 1.092 at
//!   178, but `xfmr_eager` 1.104 at 47 → 1.114 at 48 / 1.220 at 66 and MobileNet 1.045 at 3 →
//!   1.393 at 4 (the small pool's own 2 MiB unit, 5.7 MiB live); GPT-2 unchanged, Llama 1.087
//!   / 1.098. Served by the small class's blocks instead: `rand_logu` 1.112 at 134 / 1.092 at
//!   195, `xfmr_eager` 1.249 / 1.259, MobileNet 1.303 / 1.429. Only the random trace gains, so
//!   neither was kept.

use std::collections::VecDeque;

use super::handles::Handles;
use super::sites::Sites;
use super::units::Units;
use super::{ArenaPool, Block, State};
use crate::backend::BlockId;
use crate::suballoc::{Landmark, Region};
use crate::{Error, Result};

#[cfg(doc)]
use crate::backend::{Growable, InPlaceGrowth};

/// The arena holds up to its live peak plus this fraction of it before it moves memory: free
/// memory under that is kept where it is (a later tensor placed there costs no driver call), and
/// the peak stays within about 3 % of the live one, the growth step's bound.
pub const ALLOWANCE_DIVISOR: u64 = 32;

/// The smallest granule an arena gives back and moves: 64 KiB. On the issue 14 traces the host's
/// 4 KiB pages peak as low (1.031× live against 1.031–1.034×) but cost 3–10× the time per
/// allocation on the large ones, where a tensor spans thousands of pages.
pub const MIN_GRANULE: u64 = 64 << 10;

/// Places TLSF offers a request that lands on decommitted granules, beyond the first.
const PROBES: usize = 3;

/// Spare units a request past the pool's peak is tried in, smallest first (with whole units):
/// a unit whose free block TLSF does not find near the request's place is passed over. As many
/// runs of spare granules are tried after them, in address order.
const SPARE_UNIT_TRIES: usize = 4;

/// Which granules of an arena with holes hold memory, and which of those are spare.
#[derive(Debug)]
pub(super) struct Holes {
    /// log2 of the granule.
    shift: u32,
    /// Granules of the committed extent that are backed by memory.
    committed: Units,
    /// Committed granules wholly in free space: memory the arena may move or give back.
    spare: Units,
    /// Granule ranges that became spare, oldest first (entries go stale as granules are taken;
    /// the bitmap decides): memory is moved from the holes that have been free the longest,
    /// not from those just freed, where the next tensors of a step are likely placed.
    queue: VecDeque<(u64, u64)>,
    /// The units memory goes back and moves in, on a backend that takes only whole ones
    /// ([`handles`](super::handles)); `None` where any granule goes alone.
    handles: Option<Handles>,
    /// Where each allocation site went last time ([`sites`](super::sites)); `None` when
    /// [`ArenaConfig::learned_placement`](super::ArenaConfig::learned_placement) is off.
    pub(super) sites: Option<Sites>,
}

impl Holes {
    /// An extent of `extent` bytes on a backend of `granularity` (a power of two), all
    /// committed and none spare, in units that go only whole when `whole_units`
    /// ([`InPlaceGrowth::whole_units`]). The arena's granule is the backend's, at least
    /// [`MIN_GRANULE`] where granules go alone; the part of the extent past its last whole
    /// granule is never given back. (With whole units the granule is the backend's own, so
    /// every extent is whole granules and no unit ends inside one.)
    pub(super) fn new(granularity: u64, extent: u64, whole_units: bool) -> Self {
        let granule = if whole_units {
            granularity
        } else {
            granularity.max(MIN_GRANULE)
        };
        let mut h = Holes {
            shift: granule.trailing_zeros(),
            committed: Units::default(),
            spare: Units::default(),
            queue: VecDeque::new(),
            handles: whole_units.then(Handles::default),
            sites: None,
        };
        h.resize(extent);
        h
    }

    /// Whether memory goes back and moves only in whole units.
    pub(super) fn whole_units(&self) -> bool {
        self.handles.is_some()
    }

    /// The extent grows to `extent` bytes without memory ([`Growable::extend_block`]): the
    /// granules added are decommitted.
    pub(super) fn extend(&mut self, extent: u64) {
        let len = extent >> self.shift;
        self.committed.resize(len, false);
        self.spare.resize(len, false);
    }

    /// Bytes of the extent not backed by memory.
    pub(super) fn decommitted(&self) -> u64 {
        (self.committed.len() - self.committed.ones()) << self.shift
    }

    /// The arena's granule in bytes.
    pub(super) fn granule(&self) -> u64 {
        1 << self.shift
    }

    /// The extent becomes `extent` bytes: granules added are committed (growth maps memory, as
    /// one unit), granules removed are forgotten.
    pub(super) fn resize(&mut self, extent: u64) {
        let (old, len) = (self.committed.len(), extent >> self.shift);
        self.committed.resize(len, true);
        self.spare.resize(len, false);
        if let Some(u) = self.handles.as_mut() {
            if len > old {
                u.add(old, len - old);
            } else {
                u.truncate(len);
            }
        }
    }

    /// The first byte at or after `offset` where no unit is cut in two (`offset` itself where
    /// granules go alone): where a shrink may end.
    pub(super) fn unit_boundary(&self, offset: u64) -> u64 {
        match self.handles.as_ref() {
            Some(u) if offset.is_multiple_of(self.granule()) => {
                u.boundary(offset >> self.shift) << self.shift
            }
            _ => offset,
        }
    }

    /// Units of memory, where they go only whole (`None` elsewhere).
    #[cfg(test)]
    pub(super) fn unit_count(&self) -> Option<usize> {
        self.handles.as_ref().map(Handles::count)
    }

    /// `[offset, offset + size)` became (part of) the free block of the same extent: its whole
    /// committed granules are spare.
    pub(super) fn freed(&mut self, offset: u64, size: u64) {
        let g = 1u64 << self.shift;
        let a = offset.div_ceil(g);
        let b = ((offset + size) >> self.shift).min(self.committed.len());
        self.mark_spare(a, b, (a, b));
    }

    /// The region `freed` (offset, size) went back into the free block `merged` (offset, size).
    /// Only the granules it touched can have become spare (widened by one on each side for the
    /// slack TLSF keeps with a region, under its minimum split, far below a granule; and only
    /// those wholly inside `merged`): its free neighbours' granules were spare already. So a
    /// free costs the region's words, not the merged block's (next to a free tail of
    /// gigabytes it scanned all of it). The whole merged hole is queued, as one that just grew:
    /// queuing the region's granules alone moved memory out of older parts of growing holes,
    /// and peaked higher (1.057× live on `rand_logu` at 2 MiB instead of 1.048×).
    pub(super) fn freed_region(&mut self, freed: (u64, u64), merged: (u64, u64)) {
        let g = 1u64 << self.shift;
        let ((offset, size), (r_offset, r_size)) = (merged, freed);
        let a = offset
            .div_ceil(g)
            .max((r_offset >> self.shift).saturating_sub(1));
        let b = ((offset + size) >> self.shift)
            .min((r_offset + r_size).div_ceil(g) + 1)
            .min(self.committed.len());
        let whole = (
            offset.div_ceil(g),
            ((offset + size) >> self.shift).min(self.committed.len()),
        );
        self.mark_spare(a, b, whole);
    }

    /// Granules `[a, b)` lie wholly in free space: the committed ones become spare.
    fn mark_spare(&mut self, a: u64, b: u64, hole: (u64, u64)) {
        if a < b && self.spare.set_where(&self.committed, a, b) > 0 {
            if let Some(u) = self.handles.as_mut() {
                u.respare(a, b, &self.spare);
                return;
            }
            self.queue.push_back(hole);
            if self.queue.len() > 2 * self.spare.ones() as usize + 64 {
                // Mostly stale: rebuild from the bitmap (in address order; the ages are lost),
                // in the queue's own memory (a new one per rebuild was a malloc and a free on
                // the free path).
                self.queue.clear();
                self.queue
                    .extend(self.spare.runs(0, self.spare.len(), true));
            }
        }
    }

    /// Granules `[a, b)` touched by `[offset, offset + size)`.
    /// (The part past the last whole granule is always committed and not tracked.)
    fn touched(&self, offset: u64, size: u64) -> (u64, u64) {
        let g = 1u64 << self.shift;
        let len = self.committed.len();
        (
            (offset >> self.shift).min(len),
            (offset + size).div_ceil(g).min(len),
        )
    }

    /// Decommitted granules under `region`.
    fn lacking(&self, region: &Region) -> u64 {
        if self.committed.ones() == self.committed.len() {
            return 0;
        }
        let (a, b) = self.touched(region.offset, region.size);
        if self.committed.all(a, b) {
            return 0;
        }
        (b - a) - self.committed.count(a, b)
    }

    /// `[offset, offset + size)` was allocated: its granules are no longer spare. Returns the
    /// granules `[a, b)` it touches.
    fn taken(&mut self, offset: u64, size: u64) -> (u64, u64) {
        let (a, b) = self.touched(offset, size);
        if self.spare.clear(a, b) > 0 {
            if let Some(u) = self.handles.as_mut() {
                u.unspare(a, b);
            }
        }
        (a, b)
    }

    /// The first run of decommitted granules in `[from, b)`, as (start, end).
    fn next_lacking(&self, from: u64, b: u64) -> Option<(u64, u64)> {
        if self.committed.ones() == self.committed.len() {
            return None;
        }
        let start = self.committed.next(from, b, false)?;
        Some((start, self.committed.next(start, b, true).unwrap_or(b)))
    }

    /// Takes up to `n` spare granules below granule `end`, one run: with whole units the
    /// largest spare unit that fits, else from the range that became spare the longest ago;
    /// returns its first granule and length.
    fn take_spare(&mut self, n: u64, end: u64) -> Option<(u64, u64)> {
        let end = end.min(self.spare.len());
        if let Some(u) = self.handles.as_mut() {
            let (start, len) = u.take(n, end)?;
            self.spare.clear(start, start + len);
            return Some((start, len));
        }
        let mut skipped = Vec::new();
        let mut found = None;
        while let Some((a, b)) = self.queue.pop_front() {
            let b = b.min(self.spare.len());
            let Some(start) = self.spare.next(a, b.min(end), true) else {
                if b > end && a < b {
                    // Spare past `end` only: keep the entry for another caller.
                    skipped.push((a, b));
                }
                continue;
            };
            let stop = self
                .spare
                .next(start, b.min(end), false)
                .unwrap_or(b.min(end))
                .min(start + n);
            if stop < b {
                self.queue.push_front((stop, b));
            }
            found = Some((start, stop - start));
            break;
        }
        for e in skipped.into_iter().rev() {
            self.queue.push_front(e);
        }
        let (start, len) = found?;
        self.spare.clear(start, start + len);
        Some((start, len))
    }

    /// With whole units, the places where a request of `size` bytes at `align` lies wholly on
    /// one spare unit, in the smallest such units first (at most [`SPARE_UNIT_TRIES`]), as byte
    /// offsets; none where granules go alone.
    fn spare_unit_places(&mut self, size: u64, align: u64) -> [Option<u64>; SPARE_UNIT_TRIES] {
        let mut places = [None; SPARE_UNIT_TRIES];
        let shift = self.shift;
        let Some(u) = self.handles.as_mut() else {
            return places;
        };
        let mut units = [None; SPARE_UNIT_TRIES];
        u.smallest(size.div_ceil(1 << shift), &mut units);
        for (place, (start, len)) in places.iter_mut().zip(units.into_iter().flatten()) {
            *place = place_on(start, start + len, shift, size, align);
        }
        places
    }

    /// With whole units, the places where a request of `size` bytes at `align` lies wholly on
    /// a run of spare granules, the first such runs in address order (at most
    /// [`SPARE_UNIT_TRIES`]), as byte offsets; none where granules go alone. A run may lie in
    /// a unit a live tensor holds, or span units: committed memory the request needs no call
    /// for.
    fn spare_run_places(&self, size: u64, align: u64) -> [Option<u64>; SPARE_UNIT_TRIES] {
        let mut places = [None; SPARE_UNIT_TRIES];
        if self.handles.is_none() {
            return places;
        }
        let shift = self.shift;
        let fits = self
            .spare
            .runs(0, self.spare.len(), true)
            .filter_map(|(a, b)| place_on(a, b, shift, size, align));
        for (place, offset) in places.iter_mut().zip(fits) {
            *place = Some(offset);
        }
        places
    }

    /// With whole units, takes the smallest spare unit to give back; as [`Holes::take_spare`].
    fn take_smallest_unit(&mut self) -> Option<(u64, u64)> {
        let (start, len) = self.handles.as_mut()?.take_smallest()?;
        self.spare.clear(start, start + len);
        Some((start, len))
    }

    /// `n` granules taken at `from` by [`Holes::take_spare`] stay where they are: spare again.
    fn untake(&mut self, from: u64, n: u64) {
        self.spare.set(from, from + n);
        if let Some(u) = self.handles.as_mut() {
            u.untake(from, n);
        }
    }

    /// The memory of `n` granules taken at `from` now backs granule `to` on.
    fn moved(&mut self, from: u64, to: u64, n: u64) {
        self.committed.clear(from, from + n);
        self.committed.set(to, to + n);
        if let Some(u) = self.handles.as_mut() {
            u.moved(from, to);
        }
    }

    /// The memory of `n` granules taken at `from` was given back.
    fn given_back(&mut self, from: u64, n: u64) {
        self.committed.clear(from, from + n);
        if let Some(u) = self.handles.as_mut() {
            u.removed(from);
        }
    }

    /// Granules `[a, b)` were backed with new memory by one call: one unit.
    fn backed(&mut self, a: u64, b: u64) {
        self.committed.set(a, b);
        if let Some(u) = self.handles.as_mut() {
            u.add(a, b - a);
        }
    }
}

/// Checks for the pool's invariants.
impl Holes {
    /// `[offset, offset + size)`, a held region, is backed by memory and not spare.
    pub(super) fn check_backed(&self, offset: u64, size: u64) -> std::result::Result<(), String> {
        let (a, b) = self.touched(offset, size);
        if self.committed.count(a, b) != b - a {
            return Err(format!(
                "region at {offset} of {size} bytes lies on decommitted granules"
            ));
        }
        if self.spare.count(a, b) != 0 {
            return Err(format!(
                "region at {offset} of {size} bytes lies on spare granules"
            ));
        }
        Ok(())
    }

    /// Every committed granule wholly inside `[offset, offset + size)`, free space, is spare
    /// (a free that left one out would keep its memory from being moved or given back).
    pub(super) fn check_free(&self, offset: u64, size: u64) -> std::result::Result<(), String> {
        let g = 1u64 << self.shift;
        let a = offset.div_ceil(g);
        let b = ((offset + size) >> self.shift).min(self.committed.len());
        if a < b && self.committed.count(a, b) != self.spare.count(a, b) {
            return Err(format!(
                "free space at {offset} of {size} bytes has committed granules that are not spare"
            ));
        }
        Ok(())
    }

    /// Spare granules are committed, and the units agree with both.
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        if let Some(u) = &self.handles {
            u.check(&self.committed, &self.spare)?;
        }
        let spare_uncommitted = (0..self.spare.len())
            .filter(|i| self.spare.get(*i) && !self.committed.get(*i))
            .count();
        if spare_uncommitted > 0 || self.spare.len() != self.committed.len() {
            return Err(format!(
                "{spare_uncommitted} spare granules are not committed"
            ));
        }
        Ok(())
    }
}

/// The lowest offset at `align` (a power of two, checked) from which `size` bytes lie within
/// granules `[start, end)` of `2^shift` bytes, if any.
fn place_on(start: u64, end: u64, shift: u32, size: u64, align: u64) -> Option<u64> {
    let offset = ((start << shift) + align - 1) & !(align - 1);
    (offset + size <= end << shift).then_some(offset)
}

impl ArenaPool {
    /// The arena's holes, when it has them.
    pub(super) fn holes(st: &mut State, index: usize) -> Option<&mut Holes> {
        st.blocks
            .get_mut(index)
            .and_then(Option::as_mut)
            .and_then(|b| b.holes.as_mut())
    }

    /// A request of `size` bytes at `align` was placed at `region` of the block at `index`: the
    /// arena's sites learn where it went (when it is in the arena) and see the allocation.
    pub(super) fn placed(st: &mut State, index: usize, region: &Region, size: u64, align: u64) {
        let Some(arena) = st.arena else {
            return;
        };
        if let Some(s) = Self::holes(st, arena).and_then(|h| h.sites.as_mut()) {
            if index == arena {
                let key = s.key(size, align);
                s.learn(key, region);
            }
            s.saw(size, false);
        }
    }

    /// A region of `size` bytes went back to its block: the arena's sites see the free. When
    /// that emptied the pool, their history starts again: the next run of the model then meets
    /// the histories its first run had, and its first layer the places that one learned.
    pub(super) fn unplaced(st: &mut State, size: u64) {
        let (arena, empty) = (st.arena, st.stats.in_use == 0);
        if let Some(s) = arena.and_then(|a| Self::holes(st, a)?.sites.as_mut()) {
            s.saw(size, true);
            if empty {
                s.restart();
            }
        }
    }

    /// Committed bytes of the block at `index` (0 for none).
    fn committed(st: &State, index: usize) -> u64 {
        st.blocks
            .get(index)
            .and_then(Option::as_ref)
            .map_or(0, |b| b.committed())
    }

    /// Places a request in the arena, backing its granules with memory. `Ok(None)` when it
    /// does not fit, or the budget or the device refuses the memory it lacks.
    pub(super) fn try_arena(
        &self,
        st: &mut State,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>> {
        let Some(i) = st.arena else {
            return Ok(None);
        };
        let Some(b) = st.blocks[i]
            .as_mut()
            .filter(|b| b.carving.free_bytes() >= size)
        else {
            return Ok(None);
        };
        // Where the site went last time, when that range is free again ([`sites`](super::sites)).
        let sites = b.holes.as_mut().and_then(|h| h.sites.as_mut());
        let hint = sites.and_then(|s| {
            let key = s.key(size, align);
            s.hint(key)
        });
        let hinted = match hint {
            // `align` is a power of two (checked): a mask, not a division.
            Some((offset, near)) if offset & (align - 1) == 0 => {
                b.carving.allocate_at(offset, size, align, Some(near))?
            }
            _ => None,
        };
        let Some(mut region) =
            hinted.map_or_else(|| b.carving.allocate(size, align), |r| Ok(Some(r)))?
        else {
            return Ok(None);
        };
        if let Some(h) = b.holes.as_mut() {
            let mut lacking = h.lacking(&region);
            if lacking > 0 {
                (region, lacking) = Self::probe(b, region, lacking, size, align)?;
            }
            if lacking == 0 {
                // Backed already (the usual case once placement is learned): no run to walk.
                if let Some(h) = b.holes.as_mut() {
                    h.taken(region.offset, region.size);
                }
                return Ok(Some((i, region)));
            }
            if let Some(unit) = Self::in_spare_unit(st, i, &region, size, align, lacking)? {
                Self::unplace(st, i, region)?;
                return Ok(Some((i, unit)));
            }
        }
        if self.back(st, i, &region)? {
            return Ok(Some((i, region)));
        }
        Self::unplace(st, i, region)?;
        Ok(None)
    }

    /// `region`, placed in the arena `b` with holes, lies on `lacking` decommitted granules:
    /// looks at the next few places TLSF offers and keeps the one that needs the least memory
    /// moved (the others go back). Returns it with its decommitted granules.
    fn probe(
        b: &mut Block,
        mut region: Region,
        mut lacking: u64,
        size: u64,
        align: u64,
    ) -> Result<(Region, u64)> {
        let mut others: [Option<Region>; PROBES] = Default::default();
        for slot in &mut others {
            if lacking == 0 {
                break;
            }
            let Some(next) = b.carving.allocate(size, align)? else {
                break;
            };
            let l = b.holes.as_ref().map_or(0, |h| h.lacking(&next));
            *slot = Some(if l < lacking {
                lacking = l;
                std::mem::replace(&mut region, next)
            } else {
                next
            });
        }
        for r in others.into_iter().flatten() {
            let freed = (r.offset, r.size);
            let merged = b.carving.free_merged(r)?;
            if let Some(h) = b.holes.as_mut() {
                h.freed_region(freed, merged);
            }
        }
        Ok((region, lacking))
    }

    /// With whole units, a request placed at `region` on `lacking` decommitted granules, whose
    /// memory would take the pool past both its allowance and its peak, is carved instead in
    /// the smallest spare unit that holds it, found near `region` (which the caller returns).
    /// New memory or a unit moved there would leave a larger spare unit idle beside it, and on
    /// the transformer traces those units were what the peak was made of. Under the pool's own
    /// peak (a trimmed pool growing again) the place stays: the large units spare there are
    /// the ones the step's large tensors take moments later. Where no spare unit holds it, it
    /// goes to a run of spare granules long enough (the free part of a unit a live tensor
    /// holds: committed memory, no call). `Ok(None)` when neither holds it, or TLSF does not
    /// find the ones that do.
    fn in_spare_unit(
        st: &mut State,
        index: usize,
        region: &Region,
        size: u64,
        align: u64,
        lacking: u64,
    ) -> Result<Option<Region>> {
        let Some(shift) = Self::holes(st, index)
            .filter(|h| h.handles.is_some())
            .map(|h| h.shift)
        else {
            return Ok(None);
        };
        let s = &st.stats;
        let bound = Self::allowance(st, size, shift).max(s.peak_reserved);
        if s.reserved + (lacking << shift) <= bound {
            return Ok(None);
        }
        let Some(b) = st.blocks.get_mut(index).and_then(Option::as_mut) else {
            return Ok(None);
        };
        let Some(h) = b.holes.as_mut() else {
            return Ok(None);
        };
        for offset in h.spare_unit_places(size, align).into_iter().flatten() {
            let mut unit = b
                .carving
                .allocate_at(offset, size, align, Some(region.landmark()))?;
            if unit.is_none() {
                unit = b.carving.allocate_at(offset, size, align, None)?;
            }
            if let (Some(unit), Some(h)) = (unit, b.holes.as_mut()) {
                h.taken(unit.offset, unit.size);
                return Ok(Some(unit));
            }
        }
        let Some(h) = b.holes.as_mut() else {
            return Ok(None);
        };
        // Spare granules are wholly free: TLSF holds the range, as its own block or inside one.
        for offset in h.spare_run_places(size, align).into_iter().flatten() {
            if let Some(run) = b.carving.allocate_at(offset, size, align, None)? {
                if let Some(h) = b.holes.as_mut() {
                    h.taken(run.offset, run.size);
                }
                return Ok(Some(run));
            }
        }
        Ok(None)
    }

    /// Returns a region that was never handed out to the arena's free space.
    pub(super) fn unplace(st: &mut State, index: usize, region: Region) -> Result<()> {
        let Some(b) = st.blocks.get_mut(index).and_then(Option::as_mut) else {
            return Err(Error::invalid("internal: the arena index names no block"));
        };
        let freed = (region.offset, region.size);
        let merged = b.carving.free_merged(region)?;
        if let Some(h) = b.holes.as_mut() {
            h.freed_region(freed, merged);
        }
        Ok(())
    }

    /// Backs the granules `region` touches with memory: moved from spare granules, else new.
    /// `Ok(false)` when the budget or the device refuses new memory (granules backed so far
    /// stay committed; the caller returns the region, which makes them spare).
    pub(super) fn back(&self, st: &mut State, index: usize, region: &Region) -> Result<bool> {
        // Where memory moves in whole units, the sites placed on the memory moved here follow
        // it ([`Sites::follow`]). Per granule that changed how often memory moved, not a peak
        // (unmaps at 64 KiB: `xfmr_eager_sdpa` 1293 → 367, GPT-2 191 → 263), so it is off.
        let follow = Self::holes(st, index)
            .is_some_and(|h| h.whole_units())
            .then(|| region.landmark());
        self.back_range(st, index, (region.offset, region.size), region.size, follow)
    }

    /// Backs the granules `[offset, offset + size)` touches, as [`ArenaPool::back`] a region's,
    /// for a request of `request` bytes (the pool's allowance counts it). With `follow` (the
    /// landmark of the region placed there), the sites placed on memory moved there follow it.
    pub(super) fn back_range(
        &self,
        st: &mut State,
        index: usize,
        (offset, size): (u64, u64),
        request: u64,
        follow: Option<Landmark>,
    ) -> Result<bool> {
        let Some(h) = Self::holes(st, index) else {
            return Ok(true);
        };
        let (mut pos, end) = h.taken(offset, size);
        let shift = h.shift;
        let id = Self::block_id(st, index)?;
        let allowance = Self::allowance(st, request, shift);
        // Run by run, left to right (what a run is backed with lies outside the region, so the
        // runs after it do not change).
        while let Some((a, b)) = Self::holes(st, index).and_then(|h| h.next_lacking(pos, end)) {
            let mut at = a;
            while at < b {
                // New memory while the pool stays within its allowance, else memory moved.
                let fresh = st.stats.reserved + ((b - at) << shift) <= allowance;
                let Some(h) = Self::holes(st, index) else {
                    break;
                };
                let len = h.committed.len();
                let spare = if fresh {
                    None
                } else {
                    h.take_spare(b - at, len)
                };
                // Whole units past the pool's peak: a spare unit (larger than the run, or it
                // would have been moved) goes back before new memory is made.
                let peak = st.stats.reserved + ((b - at) << shift) > st.stats.peak_reserved;
                if spare.is_none() && !fresh && peak {
                    self.give_back_smallest(st, index, id);
                }
                if let Some((from, n)) = spare {
                    let moved = self
                        .growable()
                        .and_then(|g| g.remap_range(id, from << shift, at << shift, n << shift));
                    if let Err(e) = Self::note(st, moved) {
                        if let Some(h) = Self::holes(st, index) {
                            h.untake(from, n);
                        }
                        return Err(e);
                    }
                    if let Some(h) = Self::holes(st, index) {
                        h.moved(from, at, n);
                        // The sites placed on that memory find it where it went
                        // ([`Sites::follow`]).
                        if let (Some(s), Some(near)) = (h.sites.as_mut(), follow) {
                            s.follow((from << shift, n << shift), at << shift, near);
                        }
                    }
                    at += n;
                } else {
                    if !self.commit(st, index, id, at << shift, (b - at) << shift)? {
                        return Ok(false);
                    }
                    at = b;
                }
            }
            pos = b;
        }
        Ok(true)
    }

    /// The bytes the pool may hold before the arena moves memory instead of committing more:
    /// the live peak, this request included, plus [`ALLOWANCE_DIVISOR`]⁻¹ of it, in whole
    /// granules of `1 << shift` bytes.
    pub(super) fn allowance(st: &State, size: u64, shift: u32) -> u64 {
        let s = &st.stats;
        let peak = s.peak_in_use.max(s.in_use + size);
        let g = 1u64 << shift;
        (peak + peak / ALLOWANCE_DIVISOR).div_ceil(g) * g
    }

    /// Backs `[offset, offset + size)` of the arena with new memory, charged to the budget.
    /// `Ok(false)` when the budget or the device refuses.
    fn commit(
        &self,
        st: &mut State,
        index: usize,
        id: BlockId,
        offset: u64,
        size: u64,
    ) -> Result<bool> {
        if !self.budget.try_reserve(size) {
            return Ok(false);
        }
        if let Err(e) = Self::note(
            st,
            self.growable()
                .and_then(|g| g.commit_range(id, offset, size)),
        ) {
            self.budget.release(size);
            return match e {
                Error::OutOfMemory(_) => Ok(false),
                e => Err(e),
            };
        }
        let before = Self::committed(st, index);
        if let Some(h) = Self::holes(st, index) {
            let shift = h.shift;
            h.backed(offset >> shift, (offset + size) >> shift);
        }
        self.committed_changed(st, index, before);
        Ok(true)
    }

    /// Decommits up to `at_most` bytes of spare granules below byte `below`, a run at a time;
    /// returns the bytes given back. A run the backend refuses stays committed (and spare).
    pub(super) fn release_spare(
        &self,
        st: &mut State,
        index: usize,
        below: u64,
        at_most: u64,
    ) -> Result<u64> {
        let Some(h) = Self::holes(st, index) else {
            return Ok(0);
        };
        let shift = h.shift;
        let (end, mut left) = (below >> shift, at_most >> shift);
        let id = Self::block_id(st, index)?;
        let mut released = 0;
        while left > 0 {
            let Some(h) = Self::holes(st, index) else {
                break;
            };
            let Some((from, n)) = h.take_spare(left, end) else {
                break;
            };
            if let Err(e) = self.give_back_taken(st, index, id, (from, n), shift) {
                return if released > 0 { Ok(released) } else { Err(e) };
            }
            released += n << shift;
            left -= n;
        }
        Ok(released)
    }

    /// With whole units, decommits the smallest spare unit of the arena at `index` (block `id`),
    /// if there is one. A unit the backend refuses stays committed (and spare).
    fn give_back_smallest(&self, st: &mut State, index: usize, id: BlockId) {
        let Some(h) = Self::holes(st, index) else {
            return;
        };
        let shift = h.shift;
        let Some(taken) = h.take_smallest_unit() else {
            return;
        };
        // Refused, the unit stays committed and spare: new memory is made as before.
        let _ = self.give_back_taken(st, index, id, taken, shift);
    }

    /// Decommits `n` granules from granule `from`, taken spare from the arena at `index` (block
    /// `id`), and counts them given back; refused, they are spare again and the error returned.
    fn give_back_taken(
        &self,
        st: &mut State,
        index: usize,
        id: BlockId,
        (from, n): (u64, u64),
        shift: u32,
    ) -> Result<()> {
        let r = self
            .growable()
            .and_then(|g| g.decommit_range(id, from << shift, n << shift));
        if let Err(e) = Self::note(st, r) {
            if let Some(h) = Self::holes(st, index) {
                h.untake(from, n);
            }
            return Err(e);
        }
        let before = Self::committed(st, index);
        if let Some(h) = Self::holes(st, index) {
            h.given_back(from, n);
        }
        self.budget.release(n << shift);
        self.committed_changed(st, index, before);
        Ok(())
    }

    /// Counts a change of the committed bytes of the block at `index` from `before` and tells
    /// the listener (the old extent goes, the new one comes, as for a resize).
    fn committed_changed(&self, st: &mut State, index: usize, before: u64) {
        let Some(b) = st.blocks.get(index).and_then(Option::as_ref) else {
            return;
        };
        let (id, now) = (b.id, b.committed());
        let s = &mut st.stats;
        s.reserved = s.reserved - before + now;
        s.peak_reserved = s.peak_reserved.max(s.reserved);
        self.tell(|l| {
            l.block_released(&self.config.name, id, before);
            l.block_reserved(&self.config.name, id, now);
        });
    }
}

#[cfg(test)]
mod tests;
