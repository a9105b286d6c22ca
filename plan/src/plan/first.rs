//! The first plan, verified while it is built: the sweep ([`super::sweep`]) hands each chunk of
//! placed endpoints to the verifier ([`Checker`]), on a second thread when the portfolio has one,
//! else interleaved on the same thread. So the plan `solve` falls back on is proved valid when the
//! sweep ends, not one verification later. On two threads the sweep never waits for the verifier
//! (checking costs more per endpoint than placing): once the plan is whole, the sweep's thread
//! checks it from the last endpoint back until the two meet ([`Meet`]).
//!
//! The sweep is cut as soon as finishing from there (placing the rest in slabs, which checks it in
//! its slots as it goes, while the verifier finishes the endpoints placed before the cut) would no
//! longer end by the deadline, estimated from what the sweep and the verifier have cost so far on
//! this machine at its current load. Where the cut falls depends on that timing, so a cut first
//! plan is not reproducible run to run. A cut sweep's rest goes above the arena's top at the cut,
//! so it can peak far above slabs alone (the answer of a zero limit) where the live load is near
//! the bound all along (`docs/decisions/planner-tuning.md`). Slabs alone are placed too after a
//! cut and the lower plan is kept ([`or_slabs_alone`]); the cut comes that much earlier.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::time::Instant;

use super::Buffer;
use super::events::Events;
use super::sweep::{Sweep, Watch, sweep_best_fit};
use super::verify::{Checker, Fault, GATHER, Meet, Placed};

/// Completing a cut sweep (gathering the rest's endpoints, slab or stack operations) costs at
/// most this fraction of the sweep's good-fit placement per endpoint.
const REST_SHARE: f64 = 0.5;

/// Endpoints measured before a measured cost per endpoint replaces the prior.
const MEASURED_AFTER: usize = 8 * GATHER;

/// The first plan and what checking it cost.
#[derive(Debug)]
pub(crate) struct First {
    pub sweep: Sweep,
    /// Time the verifier spent, for the final verification's reserve.
    pub check_time: Duration,
}

/// Builds and verifies the first plan by `deadline`. `prior`: the expected seconds per endpoint
/// of the sweep and of the verifier before either is measured (from validation's speed).
/// `parallel`: verify on a second thread.
///
/// # Errors
/// The verifier's [`Fault`]: a bug in the sweep, never hidden.
pub(crate) fn first_plan(
    buffers: &[Buffer],
    events: &Events,
    padded_worst: u128,
    deadline: Instant,
    prior: (f64, f64),
    parallel: bool,
) -> Result<First, Fault> {
    let rule = Rule {
        started: Instant::now(),
        deadline,
        total: buffers.len() * 2,
        prior,
    };
    if !parallel {
        let mut inline = Inline {
            rule,
            checker: Checker::new(None, false),
            fault: None,
        };
        let sweep = sweep_best_fit(buffers, events, padded_worst, &mut inline)?;
        if let Some(fault) = inline.fault {
            return Err(fault);
        }
        settle(&inline.checker, &sweep)?;
        let sweep = or_slabs_alone(buffers, events, padded_worst, sweep)?;
        let check_time = inline.rule.full_check(inline.checker.progress(), 1);
        return Ok(First { sweep, check_time });
    }
    let progress = Progress::default();
    let meet = Meet::new(events.len());
    std::thread::scope(|s| {
        let (to_check, inbox) = mpsc::channel::<Vec<u64>>();
        let (give_back, spare) = mpsc::channel::<Vec<u64>>();
        let (progress, meet) = (&progress, &meet);
        let verifier = s.spawn(move || {
            let mut checker = Checker::new(None, false);
            let mut chunk: Vec<Placed> = Vec::with_capacity(GATHER);
            // Chunks arrive in order; the walk back may have claimed the last ones.
            for (k, offsets) in inbox.into_iter().enumerate() {
                if !meet.claim() {
                    break;
                }
                chunk.clear();
                let placed = events.range(meet.chunk(k)).zip(&offsets);
                chunk.extend(placed.map(|(event, &offset)| Placed { event, offset }));
                checker.check(&chunk)?;
                progress.publish(checker.progress());
                // The sweep may be done and gone: then the buffer is simply dropped.
                let _ = give_back.send(offsets);
            }
            Ok(checker)
        });
        let mut threaded = Threaded {
            rule,
            progress,
            to_check,
            spare,
        };
        let swept = sweep_best_fit(buffers, events, padded_worst, &mut threaded);
        let rule = threaded.rule;
        drop(threaded.to_check);
        let sweep = swept?;
        // A whole sweep is checked from the last endpoint back too, until the verifier is met; a
        // cut one was checked after the cut as it was placed, and the verifier ends at the cut
        // while slabs alone are placed here.
        let (back, alone) = match sweep.rest {
            None => (
                Some(meet.walk_back(events, &sweep.plan.offsets, Checker::new(None, true))),
                None,
            ),
            Some(_) if sweep.swept > 0 => (None, Some(slabs_alone(buffers, events, padded_worst))),
            Some(_) => (None, None),
        };
        let mut checker = verifier
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))?;
        if let Some(back) = back {
            checker = checker.join(back?);
        }
        settle(&checker, &sweep)?;
        let sweep = match alone {
            Some(alone) => lower(sweep, alone?),
            None => sweep,
        };
        // The final verification runs on two threads too.
        let check_time = rule.full_check(checker.progress(), 2);
        Ok(First { sweep, check_time })
    })
}

/// A cut sweep, or slabs alone where they peak lower; a sweep that was not cut, or was cut
/// before its first endpoint (slabs alone already), as it is.
///
/// # Errors
/// The [`Fault`] the slabs' check found.
pub(crate) fn or_slabs_alone(
    buffers: &[Buffer],
    events: &Events,
    padded_worst: u128,
    sweep: Sweep,
) -> Result<Sweep, Fault> {
    if sweep.rest.is_none() || sweep.swept == 0 {
        return Ok(sweep);
    }
    Ok(lower(sweep, slabs_alone(buffers, events, padded_worst)?))
}

/// Every buffer in slabs, from the start (the sweep cut before its first endpoint): checked in
/// its slots as it is placed, so whole and valid without the verifier.
fn slabs_alone(buffers: &[Buffer], events: &Events, padded_worst: u128) -> Result<Sweep, Fault> {
    let alone = sweep_best_fit(buffers, events, padded_worst, &mut AtOnce)?;
    settle(&Checker::new(None, false), &alone)?;
    Ok(alone)
}

/// The plan that peaks lower; the cut sweep on a tie (it placed more by good fit).
fn lower(cut: Sweep, alone: Sweep) -> Sweep {
    if alone.plan.peak < cut.plan.peak {
        alone
    } else {
        cut
    }
}

/// A sweep cut before its first endpoint, its slabs checked on the placing thread: slabs alone
/// run after a cut, while the second thread (if any) is still the verifier's.
struct AtOnce;

impl Watch for AtOnce {
    fn cut(&mut self, _: usize) -> bool {
        true
    }

    fn placed(&mut self, _: &[Placed]) {}

    fn beside(&self) -> bool {
        false
    }
}

/// Checks, once the sweep is done, what joins the verifier's part to the rest's: the buffers live
/// at a cut (those the verifier, which stopped there, has live) end at or below the rest's base,
/// and the plan's peak is the largest end.
fn settle(checker: &Checker, sweep: &Sweep) -> Result<(), Fault> {
    let Some(rest) = sweep.rest else {
        return checker.finish(sweep.plan.peak);
    };
    if checker.live_top() > rest.base {
        return Err(Fault::Certificate {
            buffer: None,
            why: "a buffer live at the cut ends above the slots' base",
        });
    }
    checker.finish_with(rest.peak, sweep.plan.peak)
}

/// When to cut the sweep; see the module docs.
struct Rule {
    started: Instant,
    deadline: Instant,
    /// Endpoints in all.
    total: usize,
    /// Seconds per endpoint of the sweep and of the verifier until measured.
    prior: (f64, f64),
}

impl Rule {
    /// Whether to cut with `done` endpoints placed and `checked` of them checked in `busy`;
    /// `alone`: the verifier runs on the sweep's thread, so their remaining times add up. After a
    /// cut, the verifier only finishes the endpoints placed before it, and the rest is checked in
    /// its slots as it is placed (about as costly as placing it, within [`REST_SHARE`]), and
    /// slabs alone are placed over every endpoint too ([`or_slabs_alone`]). That pass is counted
    /// at the first endpoint as well, where a cut costs only one of the two: a sweep that could
    /// not afford it one chunk later is cut before it starts, not after one chunk with both.
    fn cut(&self, done: usize, (checked, busy): (usize, Duration), alone: bool) -> bool {
        let sweep = per(self.started.elapsed(), done, self.prior.0);
        let check = per(busy, checked, self.prior.1);
        let rest = sweep * REST_SHARE * (2 * self.total - done) as f64;
        let behind = check * (done - checked.min(done)) as f64;
        let needed = if alone {
            rest + behind
        } else {
            rest.max(behind)
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        left.as_secs_f64() <= needed
    }

    /// What the general verifier would take over every endpoint on `threads` threads, at the cost
    /// per endpoint it showed over `checked` endpoints in `busy` (a plan that beats the first one
    /// is checked that way at the end).
    fn full_check(&self, (checked, busy): (usize, Duration), threads: u32) -> Duration {
        let check = per(busy, checked, self.prior.1);
        Duration::from_secs_f64(check * self.total as f64) / threads
    }
}

/// Seconds per endpoint: measured over `count` endpoints in `spent` once there are enough of
/// them, else `prior`.
fn per(spent: Duration, count: usize, prior: f64) -> f64 {
    if count >= MEASURED_AFTER {
        spent.as_secs_f64() / count as f64
    } else {
        prior
    }
}

/// The verifier on the sweep's thread.
struct Inline {
    rule: Rule,
    checker: Checker,
    fault: Option<Fault>,
}

impl Watch for Inline {
    fn cut(&mut self, done: usize) -> bool {
        self.rule.cut(done, self.checker.progress(), true)
    }

    fn placed(&mut self, chunk: &[Placed]) {
        if self.fault.is_none() {
            self.fault = self.checker.check(chunk).err();
        }
    }

    fn beside(&self) -> bool {
        false
    }
}

/// The verifier thread's progress, published after each chunk.
#[derive(Default)]
struct Progress {
    checked: AtomicUsize,
    busy_nanos: AtomicU64,
}

impl Progress {
    fn publish(&self, (checked, busy): (usize, Duration)) {
        let nanos = u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX);
        self.busy_nanos.store(nanos, Ordering::Relaxed);
        self.checked.store(checked, Ordering::Release);
    }

    fn read(&self) -> (usize, Duration) {
        let checked = self.checked.load(Ordering::Acquire);
        let busy = Duration::from_nanos(self.busy_nanos.load(Ordering::Relaxed));
        (checked, busy)
    }
}

/// The sweep's side of a verifier thread.
struct Threaded<'a> {
    rule: Rule,
    progress: &'a Progress,
    /// Each chunk's offsets, without a bound: the sweep never waits for the verifier (a chunk is
    /// 8 KiB, a million buffers at most 16 MB), so it is done sooner and helps check.
    to_check: mpsc::Sender<Vec<u64>>,
    /// Chunk buffers the verifier is done with.
    spare: mpsc::Receiver<Vec<u64>>,
}

impl Watch for Threaded<'_> {
    fn cut(&mut self, done: usize) -> bool {
        self.rule.cut(done, self.progress.read(), false)
    }

    fn placed(&mut self, chunk: &[Placed]) {
        let mut copy = self.spare.try_recv().unwrap_or_default();
        copy.clear();
        copy.extend(chunk.iter().map(|p| p.offset));
        // A verifier that stopped has found a fault, which its join returns.
        let _ = self.to_check.send(copy);
    }

    fn beside(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
