//! Learned placement: a site is its request and the pool's recent events; a repeated sequence
//! is put back where it went, on the host's arena with holes, without moving memory; hints never
//! place over live tensors nor change contents.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::Result;
use crate::backend::{Backend, BlockDesc, BlockId, Growable, InPlaceGrowth};
use crate::host::{HostBackend, HostConfig};
use crate::pool::arena::holes::{ALLOWANCE_DIVISOR, MIN_GRANULE};
use crate::pool::arena::testing::{assert_offers_holes, temporaries};
use crate::pool::{Allocation, ArenaConfig, ArenaPool, DevicePool};
use crate::test_adaptors::host_adaptor;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// `N` regions of 4 KiB (align 256) from a fresh 1 MiB TLSF, and the TLSF: what a site learns.
fn small_regions<const N: usize>() -> (crate::suballoc::Tlsf, [Region; N]) {
    let mut tlsf = crate::suballoc::Tlsf::new(MIB).unwrap();
    let regions = [(); N].map(|()| tlsf.allocate(4096, 256).unwrap().unwrap());
    (tlsf, regions)
}

#[test]
fn a_site_is_its_request_and_the_recent_events() {
    let mut s = Sites::new(false);
    let k = s.key(4096, 256);
    assert_eq!(k, s.key(4096, 256));
    assert_ne!(k, s.key(8192, 256), "the size is part of the site");
    assert_ne!(k, s.key(4096, 512), "the alignment is part of the site");
    s.saw(4096, false);
    let after_alloc = s.key(4096, 256);
    assert_ne!(k, after_alloc, "the history is part of the site");
    let mut t = Sites::new(false);
    t.saw(4096, true);
    assert_ne!(after_alloc, t.key(4096, 256), "a free is not an allocation");
    // Only the last HISTORY events count.
    let (mut a, mut b) = (Sites::new(false), Sites::new(false));
    a.saw(1, false);
    for _ in 0..HISTORY {
        a.saw(7, false);
        b.saw(7, false);
    }
    assert_eq!(a.key(64, 1), b.key(64, 1));
}

#[test]
fn the_window_kept_per_event_is_the_last_events_hashed_afresh() {
    // A pseudo-random stream of allocations and frees: after each event, the window equals
    // the polynomial over the last HISTORY events' values (oldest first, Horner), whatever
    // came before them.
    let mut s = Sites::new(false);
    let mut seen = Vec::new();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (size, freed) = ((x >> 24) << 8, i % 3 == 0);
        s.saw(size, freed);
        seen.push(event(size, freed));
        let from = seen.len().saturating_sub(HISTORY);
        let afresh = seen[from..]
            .iter()
            .fold(0u64, |h, v| h.wrapping_mul(BASE).wrapping_add(*v));
        assert_eq!(s.window, afresh, "after event {i}");
    }
}

#[test]
fn a_learned_site_gives_its_last_placement_back() {
    let (_, [a, b]) = small_regions();
    let mut s = Sites::new(false);
    let k = s.key(4096, 256);
    assert_eq!(s.hint(k), None);
    s.learn(k, &a);
    assert_eq!(s.hint(k), Some((a.offset, a.landmark())));
    s.learn(k, &b);
    assert_eq!(
        s.hint(k),
        Some((b.offset, b.landmark())),
        "the last placement wins"
    );
    // Another request after the same history shares its bucket and keeps it; a third evicts
    // the one learned longest ago. A hint is never given to the wrong site.
    let other = s.key(8192, 256);
    assert_ne!(other, k);
    s.learn(other, &a);
    assert_eq!(s.hint(k), Some((b.offset, b.landmark())));
    assert_eq!(s.hint(other), Some((a.offset, a.landmark())));
    let third = s.key(16384, 256);
    s.learn(third, &b);
    assert_eq!(s.hint(k), None);
    assert_eq!(s.hint(other), Some((a.offset, a.landmark())));
    assert_eq!(s.hint(third), Some((b.offset, b.landmark())));
}

/// Three adjacent regions of 64 KiB, where memory moves from and to.
fn three_regions() -> (Region, Region, Region) {
    let mut tlsf = crate::suballoc::Tlsf::new(MIB).unwrap();
    let mut next = || tlsf.allocate(64 * KIB, 256).unwrap().unwrap();
    (next(), next(), next())
}

#[test]
fn sites_follow_memory_that_moved_and_only_that() {
    let (a, b, c) = three_regions();
    let mut s = Sites::new(true);
    let (ka, kb) = (s.key(4096, 256), s.key(8192, 256));
    s.learn(ka, &a);
    s.learn(kb, &b);
    // `a`'s 64 KiB moved to where `c` lies: its site learns the place at the same distance.
    s.follow((a.offset, a.size), c.offset + 4096, c.landmark());
    assert_eq!(s.hint(ka), Some((c.offset + 4096, c.landmark())));
    assert_eq!(s.hint(kb), Some((b.offset, b.landmark())), "b did not move");
    // A followed first place is the site's place: one use elsewhere does not replace it.
    s.learn(ka, &a);
    assert_eq!(s.hint(ka), Some((c.offset + 4096, c.landmark())));
}

/// Moves are logged and followed at the next lookup: in order, only those after the site was
/// learned, and at most the last [`MOVES`].
#[test]
fn sites_follow_the_moves_after_their_placement_in_order() {
    let (a, b, c) = three_regions();
    let mut s = Sites::new(true);
    let ka = s.key(4096, 256);
    s.learn(ka, &a);
    // `a`'s memory went to `b`, then `b`'s to `c`: the site follows both.
    s.follow((a.offset, a.size), b.offset, b.landmark());
    s.follow((b.offset, b.size), c.offset, c.landmark());
    assert_eq!(s.hint(ka), Some((c.offset, c.landmark())));
    // Learned after a move, a site does not follow it.
    s.saw(1, false);
    let kb = s.key(4096, 256);
    s.follow((b.offset, b.size), a.offset, a.landmark());
    s.learn(kb, &b);
    assert_eq!(s.hint(kb), Some((b.offset, b.landmark())));
    // Learned, then more than the log holds: only the last MOVES moves are followed.
    s.saw(2, false);
    let kc = s.key(4096, 256);
    s.learn(kc, &a);
    s.follow((a.offset, a.size), b.offset, b.landmark());
    for _ in 0..MOVES {
        s.follow((c.offset, c.size), a.offset, a.landmark());
    }
    assert_eq!(
        s.hint(kc),
        Some((a.offset, a.landmark())),
        "the move to b fell out of the log"
    );
}

#[test]
fn a_restarted_history_gives_the_first_run_s_sites_back() {
    let (_, [a]) = small_regions();
    let mut s = Sites::new(false);
    let first = s.key(4096, 256);
    s.learn(first, &a);
    for size in [4096, 8192, 512] {
        s.saw(size, false);
        s.saw(size, true);
    }
    let later = s.key(4096, 256);
    assert_eq!(s.hint(later), None, "another history, another site");
    s.restart();
    assert_eq!(s.key(4096, 256), first);
    assert_eq!(s.hint(first), Some((a.offset, a.landmark())));
}

#[test]
fn a_table_that_keeps_first_places_gives_the_first_back() {
    let (mut tlsf, [a, b]) = small_regions();
    let mut s = Sites::new(true);
    let k = s.key(4096, 256);
    s.learn(k, &a);
    s.learn(k, &b);
    assert_eq!(
        s.hint(k),
        Some((a.offset, a.landmark())),
        "the first placement stays"
    );
    // Placed at its first place again, the site's landmark follows the new region.
    let (at, first) = (a.offset, a.landmark());
    tlsf.free(a).unwrap();
    let again = tlsf.allocate_at(at, 4096, 256, None).unwrap().unwrap();
    assert_ne!(again.landmark(), first);
    s.learn(k, &again);
    assert_eq!(s.hint(k), Some((at, again.landmark())));
    // Replaced by two other sites after its history (a bucket holds two), it learns anew.
    for size in [8192, 16384] {
        let other = s.key(size, 256);
        s.learn(other, &again);
    }
    s.learn(k, &b);
    assert_eq!(s.hint(k), Some((b.offset, b.landmark())));
}

#[test]
fn a_kept_first_place_missed_twice_in_a_row_for_one_other_is_replaced_by_it() {
    let (_, [a, b, c]) = small_regions();
    let mut s = Sites::new(true);
    let k = s.key(4096, 256);
    let first = Some((a.offset, a.landmark()));
    s.learn(k, &a);
    // Misses at different places, or a miss between uses at the first place, keep it.
    for r in [&b, &c, &b, &a, &b, &a] {
        s.learn(k, r);
        assert_eq!(s.hint(k), first);
    }
    s.learn(k, &b);
    assert_eq!(s.hint(k), first, "one miss keeps the first place");
    s.learn(k, &b);
    assert_eq!(
        s.hint(k),
        Some((b.offset, b.landmark())),
        "the second miss in a row at the same place learns it"
    );
    s.learn(k, &a);
    assert_eq!(s.hint(k), Some((b.offset, b.landmark())), "kept again");
}

/// The host backend, counting the holes calls (moves and new memory) the pool makes.
struct Counted {
    host: HostBackend,
    calls: AtomicU64,
}

host_adaptor!(Counted, growable);

impl Growable for Counted {
    fn in_place_growth(&self) -> InPlaceGrowth {
        self.host.in_place_growth()
    }
    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        self.host.reserve_block(desc, reserve)
    }
    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.host.resize_block(block, size)
    }
    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.host.decommit_range(block, offset, size)
    }
    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.host.commit_range(block, offset, size)
    }
    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.host.remap_range(block, from, to, size)
    }
    /// No extensions: growth is committed at the end.
    fn extend_block(&self, _: BlockId, _: u64) -> Result<()> {
        Err(crate::Error::Unsupported {
            backend: self.capabilities().backend,
            what: "holes in blocks that grow in place (extend_block)".into(),
        })
    }
}

fn pool(learned: bool) -> (Arc<Counted>, ArenaPool) {
    let backend = Arc::new(Counted {
        host: HostBackend::new(HostConfig::default()).unwrap(),
        calls: AtomicU64::new(0),
    });
    assert_offers_holes(&*backend);
    let config = ArenaConfig {
        learned_placement: learned,
        ..ArenaConfig::device()
    };
    let p = ArenaPool::new(backend.clone(), config).unwrap();
    (backend, p)
}

/// One decoder layer of a Llama-style prefill, in `xfmr_infer`'s order (a tensor is freed after
/// its last reader), at a quarter of Llama-8B's sizes over 256 tokens; `x` is the layer's input
/// and becomes its output. Returns the offsets it placed.
fn layer(p: &ArenaPool, x: &mut Option<Allocation>) -> Vec<u64> {
    const ACT: u64 = MIB;
    const KV: u64 = 256 * KIB;
    const FFN: u64 = 3584 * KIB;
    let mut offsets = Vec::new();
    let mut a = |size: u64| {
        let t = p.allocate(size, 256, "t").unwrap();
        offsets.push(t.range.offset);
        t
    };
    let f = |t: Allocation| p.free(t.handle).unwrap();
    let n1 = a(ACT);
    let q = a(ACT);
    let k = a(KV);
    let v = a(KV);
    f(n1);
    let (qr, kr) = (a(ACT), a(KV));
    f(q);
    f(k);
    let attn = a(ACT);
    f(v);
    f(qr);
    f(kr);
    let o = a(ACT);
    f(attn);
    let r1 = a(ACT);
    f(o);
    if let Some(x) = x.take() {
        f(x);
    }
    let n2 = a(ACT);
    let gate = a(FFN);
    let up = a(FFN);
    f(n2);
    let swiglu = a(FFN);
    f(gate);
    f(up);
    let down = a(ACT);
    f(swiglu);
    *x = Some(a(ACT));
    f(r1);
    f(down);
    p.check_invariants().unwrap();
    offsets
}

#[test]
fn a_repeated_sequence_goes_back_where_it_went_and_moves_nothing() {
    let (backend, p) = pool(true);
    let mut x = None;
    let mut runs = Vec::new();
    for _ in 0..8 {
        runs.push(layer(&p, &mut x));
    }
    // The layer's output alternates between two places, so the layout repeats every two runs.
    assert_eq!(runs[7], runs[5], "placements drift: {runs:?}");
    let calls = backend.calls.load(Ordering::Relaxed);
    let committed = p.stats().reserved;
    for i in 0..8 {
        assert_eq!(layer(&p, &mut x), runs[6 + i % 2], "placements drift");
    }
    assert_eq!(
        backend.calls.load(Ordering::Relaxed),
        calls,
        "a repeated run moves, commits or gives back nothing"
    );
    assert_eq!(p.stats().reserved, committed);
    if let Some(x) = x {
        p.free(x.handle).unwrap();
    }
    p.check_invariants().unwrap();
}

#[test]
fn hints_never_land_on_live_tensors_and_contents_hold() {
    let (backend, p) = pool(true);
    // The site: a megabyte after a run of temporaries. Learn where it goes.
    temporaries(&p, HISTORY / 2);
    let a = p.allocate(MIB, 256, "a").unwrap();
    let at = a.range.offset;
    p.free(a.handle).unwrap();
    // Pin its place with another tensor, then lead to the same site again.
    let pin = p.allocate(MIB, 256, "pin").unwrap();
    assert_eq!(pin.range.offset, at, "TLSF reuses the hole");
    let data = vec![9u8; MIB as usize];
    backend
        .write_mapped(pin.range.block, pin.range.offset, &data)
        .unwrap();
    temporaries(&p, HISTORY / 2);
    let b = p.allocate(MIB, 256, "b").unwrap();
    assert_ne!(b.range.offset, at, "the learned place is taken");
    let mut out = vec![0u8; MIB as usize];
    backend
        .read_mapped(pin.range.block, pin.range.offset, &mut out)
        .unwrap();
    assert!(
        out.iter().all(|x| *x == 9),
        "a live tensor's contents changed"
    );
    for x in [pin, b] {
        p.free(x.handle).unwrap();
    }
    p.check_invariants().unwrap();
}

#[test]
fn learning_moves_less_than_tlsf_alone_within_the_same_allowance() {
    let mut calls = Vec::new();
    for learned in [false, true] {
        let (backend, p) = pool(learned);
        let mut x = None;
        for _ in 0..32 {
            layer(&p, &mut x);
        }
        if let Some(x) = x {
            p.free(x.handle).unwrap();
        }
        let s = p.stats();
        assert!(
            s.peak_reserved <= s.peak_in_use + s.peak_in_use / ALLOWANCE_DIVISOR + MIN_GRANULE,
            "learned {learned}: {} reserved at most for {} live",
            s.peak_reserved,
            s.peak_in_use
        );
        assert_eq!(s.reserved, backend.host.block_bytes());
        calls.push(backend.calls.load(Ordering::Relaxed));
    }
    assert!(
        calls[1] < calls[0],
        "holes calls without / with learning: {calls:?}"
    );
}
