//! The plan verifier: an O(n log n) sweep that proves a plan valid or names two buffers that clash.
//!
//! Walk the lifetime endpoints in time order (frees before allocations at equal times) and keep the
//! live buffers ordered by offset ([`live::LiveSet`]). Live buffers are pairwise disjoint, so a new
//! buffer can only overlap the live buffer that starts last below its end: one look-up per
//! insertion.
//!
//! The walk is a [`Checker`] fed chunks of endpoints with their offsets, so the planner can check
//! its first plan while it is being built (on another thread, or interleaved with it) instead of
//! after it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::time::Instant;

use super::events::{Event, Events};
use super::{Buffer, MAX_BUFFERS, Plan, check_buffers};
use crate::{Error, Result};
use live::{Entry, LiveSet};
pub(crate) use slots::SlotCheck;

mod live;
mod slots;

/// Checks that `plan` is a valid placement of `buffers`.
///
/// Verifies, in O(n log n): one offset per buffer; every offset a multiple of its buffer's
/// alignment; no two buffers with intersecting lifetimes sharing a byte; `plan.peak` equal to
/// `max(offset + size)`; and, with a capacity, `offset + size <= capacity` for every buffer.
/// Errors name buffers by their index; [`super::CsvInstance::verify`] names them by their ids.
///
/// # Errors
/// - [`Error::SizeMismatch`] when the offset count or the reported peak is wrong;
/// - [`crate::ArgumentError`] for an invalid buffer, a misaligned offset
///   ([`NotMultiple`](crate::ArgumentError::NotMultiple)), or two overlapping buffers
///   ([`BuffersOverlap`](crate::ArgumentError::BuffersOverlap), naming both, their lifetimes and
///   byte ranges);
/// - [`Error::OutOfBounds`] when a buffer ends beyond the capacity.
pub fn verify(buffers: &[Buffer], plan: &Plan, capacity: Option<u64>) -> Result<()> {
    verify_named(buffers, plan, capacity, &|i| i.to_string())
}

/// [`verify`], naming buffer `i` as `name(i)` in errors.
pub(crate) fn verify_named(
    buffers: &[Buffer],
    plan: &Plan,
    capacity: Option<u64>,
    name: &dyn Fn(usize) -> String,
) -> Result<()> {
    check_buffers(buffers, name)?;
    if buffers.len() > MAX_BUFFERS {
        return Err(crate::ArgumentError::too_many(
            "buffers",
            buffers.len() as u64,
            MAX_BUFFERS as u64,
        )
        .into());
    }
    verify_sorted(buffers, &Events::new(buffers), plan, capacity, false)
        .map_err(|fault| fault.into_error(buffers, name))
}

/// [`verify`] for valid buffers whose sorted endpoints are `events` (as [`super::validate`]
/// returned them); `parallel`: on two threads, one walking forward and one back (see [`Meet`]).
pub(crate) fn verify_sorted(
    buffers: &[Buffer],
    events: &Events,
    plan: &Plan,
    capacity: Option<u64>,
    parallel: bool,
) -> Result<(), Fault> {
    if plan.offsets.len() != buffers.len() {
        return Err(Fault::Length(plan.offsets.len()));
    }
    let meet = Meet::new(events.len());
    let offsets = &plan.offsets;
    let checker = if parallel {
        std::thread::scope(|s| {
            let back = s.spawn(|| meet.walk_back(events, offsets, Checker::new(capacity, true)));
            let front = meet.walk_front(events, offsets, Checker::new(capacity, false));
            let back = back.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
            Ok::<_, Fault>(front?.join(back?))
        })?
    } else {
        meet.walk_front(events, offsets, Checker::new(capacity, false))?
    };
    checker.finish(plan.peak)
}

/// Two checkers walking toward each other over the endpoints in chunks of [`GATHER`], one from
/// the first endpoint, one from the last (see [`Checker`]): each claims its next chunk before it
/// checks it, so together they check every chunk once, however the threads are scheduled.
///
/// Why that checks everything: two buffers clash when both are live between the later
/// allocation and the earlier free. If the later allocation is in the front part, the front
/// checker meets it with the other buffer in its live set; otherwise both frees are in the back
/// part, and the back checker (opening buffers at their frees) meets the earlier free with the
/// other buffer live. Each buffer has its allocation in the front part or its free in the back
/// part, so each is opened, bounds-checked and counted in the peak by one of them; alignment is
/// checked at the allocation, by whichever checker walks over it.
#[derive(Debug)]
pub(crate) struct Meet {
    endpoints: usize,
    chunks: usize,
    taken: AtomicUsize,
}

impl Meet {
    pub fn new(endpoints: usize) -> Self {
        Meet {
            endpoints,
            chunks: endpoints.div_ceil(GATHER),
            taken: AtomicUsize::new(0),
        }
    }

    /// Claims one more chunk; false once every chunk is taken.
    pub fn claim(&self) -> bool {
        self.taken.fetch_add(1, Ordering::Relaxed) < self.chunks
    }

    /// The endpoint positions of chunk `k`.
    pub fn chunk(&self, k: usize) -> std::ops::Range<usize> {
        k * GATHER..((k + 1) * GATHER).min(self.endpoints)
    }

    /// Checks chunks from the first on, while they can be claimed, with the plan's `offsets`.
    pub fn walk_front(
        &self,
        events: &Events,
        offsets: &[u64],
        mut checker: Checker,
    ) -> Result<Checker, Fault> {
        let mut chunk = Vec::with_capacity(GATHER);
        let mut k = 0;
        while self.claim() {
            gather(&mut chunk, events.range(self.chunk(k)), offsets);
            checker.check(&chunk)?;
            k += 1;
        }
        Ok(checker)
    }

    /// Checks chunks from the last one back, while they can be claimed.
    pub fn walk_back(
        &self,
        events: &Events,
        offsets: &[u64],
        mut checker: Checker,
    ) -> Result<Checker, Fault> {
        let mut chunk = Vec::with_capacity(GATHER);
        let mut k = self.chunks;
        while self.claim() {
            k -= 1;
            gather(&mut chunk, events.range(self.chunk(k)).rev(), offsets);
            checker.check(&chunk)?;
        }
        Ok(checker)
    }
}

/// Refills `chunk` with `events` and their buffers' offsets. The offsets are gathered before the
/// check, in a loop of independent loads: at a million buffers, cache misses on them were 90% of
/// the sweep while interleaved with the live set.
fn gather(chunk: &mut Vec<Placed>, events: impl Iterator<Item = Event>, offsets: &[u64]) {
    chunk.clear();
    chunk.extend(events.map(|event| Placed {
        event,
        offset: offsets[event.id as usize],
    }));
}

/// Endpoints whose data one gather loop fetches (see `verify_sorted`).
pub(crate) const GATHER: usize = 1024;

/// One endpoint of a plan: the event, and its buffer's offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    pub event: Event,
    pub offset: u64,
}

/// What is wrong with a plan, by buffer index; [`Fault::into_error`] names the buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Not one offset per buffer: this many.
    Length(usize),
    /// Buffer `.0` at offset `.1` breaks its alignment.
    Misaligned(usize, u64),
    /// Buffer at `offset` of `size` bytes ends past `limit` (the capacity, or `u64::MAX`).
    OutOfBounds {
        offset: u64,
        size: u64,
        limit: Option<u64>,
    },
    /// The reported peak is not the plan's.
    Peak { reported: u64, actual: u64 },
    /// Buffers `a` and `b` (each with its byte range) share bytes while both are live.
    Clash {
        a: (usize, u64, u64),
        b: (usize, u64, u64),
    },
    /// A plan checked against its slots ([`SlotCheck`]) breaks them: a bug in the planner.
    Certificate {
        buffer: Option<usize>,
        why: &'static str,
    },
}

impl Fault {
    /// The error a caller sees, buffer `i` named `name(i)`.
    pub fn into_error(self, buffers: &[Buffer], name: &dyn Fn(usize) -> String) -> Error {
        match self {
            Fault::Length(actual) => Error::SizeMismatch {
                what: "plan offsets (one per buffer)".into(),
                expected: buffers.len() as u64,
                actual: actual as u64,
            },
            Fault::Misaligned(i, o) => crate::ArgumentError::not_multiple(
                format!("offset of buffer {}", name(i)),
                o,
                "its alignment",
                buffers[i].align,
            )
            .into(),
            Fault::OutOfBounds {
                offset,
                size,
                limit,
            } => Error::OutOfBounds {
                what: if limit.is_some() {
                    "planned arena (capacity)"
                } else {
                    "u64 address space"
                },
                offset,
                size,
                limit: limit.unwrap_or(u64::MAX),
            },
            Fault::Peak { reported, actual } => Error::SizeMismatch {
                what: "plan peak (max offset + size)".into(),
                expected: actual,
                actual: reported,
            },
            Fault::Clash { a, b } => {
                let ((a, ao, aend), (b, bo, bend)) = if a.0 < b.0 { (a, b) } else { (b, a) };
                crate::ArgumentError::BuffersOverlap {
                    first: name(a),
                    first_lifetime: [buffers[a].lower, buffers[a].upper],
                    first_bytes: [ao, aend],
                    second: name(b),
                    second_lifetime: [buffers[b].lower, buffers[b].upper],
                    second_bytes: [bo, bend],
                }
                .into()
            }
            Fault::Certificate { buffer, why } => Error::invariant(
                "a plan in slots keeps to its slots",
                match buffer {
                    Some(i) => format!("buffer {}: {why}", name(i)),
                    None => why.to_string(),
                },
            ),
        }
    }
}

/// The verifier's sweep, fed the endpoints a chunk at a time in time order (or, walking back,
/// in reverse: then a buffer opens at its free and closes at its allocation): every buffer is
/// checked where it opens for overflow, capacity and overlap with the buffers live then, and for
/// alignment at its allocation.
#[derive(Debug)]
pub(crate) struct Checker {
    capacity: Option<u64>,
    /// Walking from the last endpoint back.
    backward: bool,
    live: LiveSet,
    peak: u64,
    /// Endpoints checked, and the time spent on them (to tell what checking the rest costs).
    checked: usize,
    busy: Duration,
}

impl Checker {
    pub fn new(capacity: Option<u64>, backward: bool) -> Self {
        Checker {
            capacity,
            backward,
            live: LiveSet::default(),
            peak: 0,
            checked: 0,
            busy: Duration::ZERO,
        }
    }

    /// Checks the next endpoints.
    pub fn check(&mut self, chunk: &[Placed]) -> Result<(), Fault> {
        let started = Instant::now();
        for p in chunk {
            let (i, o, size) = (p.event.id, p.offset, p.event.size);
            if p.event.alloc && !o.is_multiple_of(p.event.align) {
                return Err(Fault::Misaligned(i as usize, o));
            }
            if p.event.alloc == self.backward {
                let removed = self.live.remove(o);
                debug_assert_eq!(removed.map(|r| r.id), Some(i), "live set out of sync");
                continue;
            }
            let end = o.checked_add(size).ok_or(Fault::OutOfBounds {
                offset: o,
                size,
                limit: None,
            })?;
            if self.capacity.is_some_and(|cap| end > cap) {
                return Err(Fault::OutOfBounds {
                    offset: o,
                    size,
                    limit: self.capacity,
                });
            }
            // Live buffers are disjoint, so if any overlaps `[o, end)`, the one starting last
            // below `end` does.
            if let Some(last) = self.live.last_below(end)
                && last.end > o
            {
                return Err(Fault::Clash {
                    a: (last.id as usize, last.offset, last.end),
                    b: (i as usize, o, end),
                });
            }
            self.live.insert(Entry {
                offset: o,
                end,
                id: i,
            });
            self.peak = self.peak.max(end);
        }
        self.checked += chunk.len();
        self.busy += started.elapsed();
        Ok(())
    }

    /// Endpoints checked so far, and the time that took.
    pub fn progress(&self) -> (usize, Duration) {
        (self.checked, self.busy)
    }

    /// The two checkers of a [`Meet`] as one, once both have stopped.
    pub fn join(self, other: Checker) -> Checker {
        Checker {
            peak: self.peak.max(other.peak),
            checked: self.checked + other.checked,
            busy: self.busy + other.busy,
            ..self
        }
    }

    /// After the last endpoint: whether `reported` is the plan's peak.
    pub fn finish(&self, reported: u64) -> Result<(), Fault> {
        self.finish_with(0, reported)
    }

    /// [`Self::finish`] for a plan whose other buffers, checked elsewhere, end at most at `others`.
    pub fn finish_with(&self, others: u64, reported: u64) -> Result<(), Fault> {
        let actual = self.peak.max(others);
        if reported == actual {
            Ok(())
        } else {
            Err(Fault::Peak { reported, actual })
        }
    }

    /// The largest end of a buffer live now (0 for none).
    pub fn live_top(&self) -> u64 {
        self.live.last_below(u64::MAX).map_or(0, |e| e.end)
    }
}

#[cfg(test)]
mod tests;
