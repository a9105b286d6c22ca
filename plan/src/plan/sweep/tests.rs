use super::*;
use crate::plan::{align_up, lower_bound, random_lifetimes, verify};

/// A watch that cuts after `chunks` chunks (never, with `usize::MAX`) and keeps what it is handed.
pub(crate) struct CutAfter {
    pub chunks: usize,
    pub seen: Vec<Placed>,
    /// Whether the rest is checked on a second thread.
    pub beside: bool,
}

impl CutAfter {
    pub fn new(chunks: usize) -> Self {
        CutAfter {
            chunks,
            seen: Vec::new(),
            beside: false,
        }
    }
}

impl Watch for CutAfter {
    fn cut(&mut self, done: usize) -> bool {
        done >= self.chunks.saturating_mul(GATHER)
    }

    fn placed(&mut self, chunk: &[Placed]) {
        self.seen.extend_from_slice(chunk);
    }

    fn beside(&self) -> bool {
        self.beside
    }
}

/// The whole sweep, never cut.
pub(crate) fn sweep_all(buffers: &[Buffer], events: &Events) -> Plan {
    sweep_best_fit(buffers, events, 0, &mut CutAfter::new(usize::MAX))
        .unwrap()
        .plan
}

/// The largest end among the allocations handed over, and among those not freed in them.
fn ends_before(seen: &[Placed]) -> (u64, u64) {
    let mut live = std::collections::BTreeMap::new();
    for p in seen {
        if p.event.alloc {
            live.insert(p.event.id, p.offset + p.event.size);
        } else {
            live.remove(&p.event.id);
        }
    }
    let end = |p: &Placed| p.event.alloc.then(|| p.offset + p.event.size);
    let peak = seen.iter().filter_map(end).max().unwrap_or(0);
    (peak, live.values().copied().max().unwrap_or(0))
}

/// Random lifetimes, then a second time-connected group far later with aligned buffers.
fn two_groups() -> Vec<Buffer> {
    let mut b = random_lifetimes(50_000, 4);
    b.extend((0..200).map(|i| Buffer {
        align: 1 << (i % 7),
        ..Buffer::new(1_000_000 + i, 1_000_040 + i, 3 + 5 * i)
    }));
    b
}

/// Every buffer stacked per group, as a cut sweep used to complete: its peak.
fn stacked_peak(buffers: &[Buffer]) -> u64 {
    let events = Events::new(buffers);
    let (mut live, mut top, mut peak) = (0usize, 0u64, 0u64);
    for e in events.iter() {
        if !e.alloc {
            live -= 1;
            continue;
        }
        if live == 0 {
            top = 0;
        }
        live += 1;
        let b = &buffers[e.id as usize];
        top = align_up(top, b.align) + b.size;
        peak = peak.max(top);
    }
    peak
}

#[test]
fn a_cut_sweep_keeps_what_it_placed_and_puts_the_rest_in_slabs() {
    let b = two_groups();
    let events = Events::new(&b);
    let (_, padded) = crate::plan::validate(&b, 1).unwrap();
    let full = sweep_best_fit(&b, &events, padded, &mut CutAfter::new(usize::MAX)).unwrap();
    assert!(full.finished());
    verify(&b, &full.plan, None).unwrap();
    let lb = lower_bound(&b);
    for chunks in [0, 1, 30, 70] {
        let mut watch = CutAfter::new(chunks);
        let cut = sweep_best_fit(&b, &events, padded, &mut watch).unwrap();
        assert_eq!((cut.swept, cut.slabs), (chunks * GATHER, true));
        assert!(!cut.finished());
        verify(&b, &cut.plan, None).unwrap();
        // The buffers allocated before the cut are where the full sweep put them.
        let before: Vec<u32> = events
            .iter()
            .take(chunks * GATHER)
            .filter(|e| e.alloc)
            .map(|e| e.id)
            .collect();
        for &i in &before {
            assert_eq!(cut.plan.offsets[i as usize], full.plan.offsets[i as usize]);
        }
        // Every endpoint before the cut was handed over once, in order, with the plan's offsets;
        // the rest were checked in their slots.
        assert_eq!(watch.seen.len(), chunks * GATHER);
        let rest = cut.rest.unwrap();
        let (peak, live_top) = ends_before(&watch.seen);
        assert_eq!(rest.peak.max(peak), cut.plan.peak);
        assert!(live_top <= rest.base);
        for (p, e) in watch.seen.iter().zip(events.iter()) {
            assert_eq!(p.event, e);
            assert_eq!(p.offset, cut.plan.offsets[e.id as usize]);
        }
        // The rest checked on a second thread: the same plan, the same check.
        let mut beside = CutAfter::new(chunks);
        beside.beside = true;
        let threaded = sweep_best_fit(&b, &events, padded, &mut beside).unwrap();
        assert_eq!(threaded.plan, cut.plan);
        assert_eq!(
            threaded.rest.map(|r| (r.base, r.peak)),
            Some((rest.base, rest.peak))
        );
        // Slabs reuse the slots of dead buffers: far below stacking the rest.
        let stacked = stacked_peak(&b);
        assert!(
            cut.plan.peak < 3 * lb && cut.plan.peak * 3 < stacked,
            "cut after {chunks} chunks: peak {} for a bound of {lb}, stacked {stacked}",
            cut.plan.peak
        );
    }
}

#[test]
fn a_cut_sweep_stacks_the_rest_when_slabs_could_overflow() {
    // A group whose padded total is near the limit of `u64` (three quarters of it), then a small
    // second group.
    let big = 1u64 << 62;
    let b = [
        Buffer::new(0, 2, big),
        Buffer::new(1, 3, big - 1),
        Buffer {
            align: big / 2,
            ..Buffer::new(2, 4, big / 2)
        },
        Buffer::new(10, 11, 5),
    ];
    let (events, padded) = crate::plan::validate(&b, 1).unwrap();
    assert!(padded > (u64::MAX / 5) as u128);
    let cut = sweep_best_fit(&b, &events, padded, &mut CutAfter::new(0)).unwrap();
    assert!(!cut.slabs);
    verify(&b, &cut.plan, None).unwrap();
    assert_eq!(cut.plan.offsets, [0, big, 2 * big, 0]);
    // Checked on a second thread, the stack is the same.
    let mut beside = CutAfter::new(0);
    beside.beside = true;
    let threaded = sweep_best_fit(&b, &events, padded, &mut beside).unwrap();
    assert_eq!((threaded.plan, threaded.slabs), (cut.plan, false));
}

#[test]
fn a_fault_in_the_rest_is_returned_from_either_thread() {
    // A check told that one buffer placed before the cut is live, which never dies: the rest's
    // check must fail at its end, whether it runs inline or beside the placing.
    let b = [Buffer::new(0, 2, 8), Buffer::new(1, 3, 8)];
    let events = Events::new(&b);
    for beside in [false, true] {
        let mut slots = Vec::new();
        let at = rest::AtCut {
            slots: &mut slots,
            cut: 0,
            live: 0,
            peak: 0,
        };
        let mut offsets = vec![0; b.len()];
        let check = SlotCheck::new(0, 1);
        let rest = rest::Rest::new(true, 0);
        let placed = rest::place_rest(&events, 0, rest, at, &mut offsets, check, beside);
        assert!(
            matches!(placed, Err(Fault::Certificate { buffer: None, .. })),
            "beside {beside}: {placed:?}"
        );
    }
}
