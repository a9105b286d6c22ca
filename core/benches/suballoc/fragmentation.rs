//! Internal fragmentation on the pool traces: each trace of the `pool_traces` bench replayed on
//! TLSF and on buddy over a range large enough that nothing is refused, counting the bytes each
//! allocator holds (its `used`: blocks with their rounding and slack) against the bytes requested.

use tensormem::suballoc::{Buddy, Region, SubAllocator, Tlsf};

#[path = "../pool_traces/traces.rs"]
#[allow(
    dead_code,
    reason = "the pool_traces bench uses the rest of the module"
)]
mod traces;

/// The range: 4 TiB, far above every trace's peak, so the numbers are rounding, not refusals.
const RANGE: u64 = 1 << 42;
/// Alignment of every request (the device pools' binding alignment); buddy's smallest block.
const ALIGN: u64 = 256;

/// Bytes held against bytes requested over one replay.
struct Held {
    /// Peak of the live requested bytes.
    peak_requested: u64,
    /// Bytes held at that peak.
    held_at_peak: u64,
    /// Sum over events of held bytes / sum of requested bytes: the time-averaged ratio.
    mean: f64,
}

fn replay<A: SubAllocator>(mut sub: A, trace: &traces::Trace) -> Held {
    let mut live: Vec<Option<Region>> = (0..trace.allocations).map(|_| None).collect();
    let (mut requested, mut peak_requested, mut held_at_peak) = (0u64, 0u64, 0u64);
    let (mut sum_requested, mut sum_held) = (0u128, 0u128);
    for e in &trace.events {
        if e.alloc {
            let r = sub.allocate(e.size, ALIGN).unwrap();
            let r = r.ok_or_else(|| format!("{}: {} bytes refused", trace.name, e.size));
            let r = r.unwrap();
            live[e.id as usize] = Some(r);
            requested += e.size;
        } else if let Some(r) = live[e.id as usize].take() {
            sub.free(r).unwrap();
            requested -= e.size;
        }
        let held = sub.used();
        if requested > peak_requested {
            (peak_requested, held_at_peak) = (requested, held);
        }
        sum_requested += u128::from(requested);
        sum_held += u128::from(held);
    }
    Held {
        peak_requested,
        held_at_peak,
        mean: sum_held as f64 / sum_requested.max(1) as f64,
    }
}

/// Prints, per trace, the bytes TLSF and buddy hold at the trace's peak of requested bytes and
/// the time-averaged ratio of held to requested bytes.
pub fn print() {
    let traces = traces::all().unwrap();
    eprintln!(
        "internal fragmentation on the pool traces: bytes held / bytes requested (align {ALIGN}, \
         buddy min block {ALIGN}, 4 TiB range: never refused)"
    );
    eprintln!(
        "  {:<16} {:>14} {:>22} {:>22} {:>17}",
        "trace", "peak requested", "TLSF held at peak", "buddy held at peak", "mean TLSF / buddy"
    );
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    for t in &traces {
        let tlsf = replay(Tlsf::new(RANGE).unwrap(), t);
        let buddy = replay(Buddy::with_min_block(RANGE, ALIGN).unwrap(), t);
        let cell = |h: &Held| {
            let ratio = h.held_at_peak as f64 / h.peak_requested as f64;
            format!("{:.1} MiB ({ratio:.3})", mib(h.held_at_peak))
        };
        eprintln!(
            "  {:<16} {:>10.1} MiB {:>22} {:>22} {:>8.3} / {:.3}",
            t.name,
            mib(tlsf.peak_requested),
            cell(&tlsf),
            cell(&buddy),
            tlsf.mean,
            buddy.mean
        );
    }
}
