//! Exhaustive interleavings of the spill state machine: two or three actors run short scripts
//! (resolve, nested resolve, read, write, release, pin, unpin, allocate under pressure, free)
//! against a device of two ranges, one atomic step per lock section of [`SpillPool`], using the
//! pool's own [`Entry`] rules. Every reachable state is visited once (states are hashed), and
//! in each one: a range an actor holds belongs to that actor's allocation, every allocation's
//! bytes (on the device or on the host) are the last ones written, no range has two owners, and
//! at the end nothing stays leased or pinned. A mutant whose leases may run out (the rule of a
//! timed lease) must be caught.

use std::collections::HashSet;

use super::entry::{Entry, Mobility, Site};
use crate::backend::Ticket;

const RANGES: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    /// Resolve, access (read, or write when `true`), release; `nested`: a second resolve and
    /// release of the same allocation inside (a write's read of its last word).
    Use {
        h: usize,
        write: bool,
        nested: bool,
    },
    Pin(usize),
    Unpin(usize),
    /// A new allocation `h` (the device is full: something spills), then its release.
    Alloc(usize),
    Free(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Start,
    /// Leased and in host memory: allocate a range (spilling if needed).
    RestoreAlloc,
    /// A range is allocated (`pending`): copy back, unless someone else did.
    RestoreFinish,
    Nested,
    NestedRelease,
    Access,
    Release,
    /// `Alloc`: the range is allocated; insert the entry.
    Insert,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Actor {
    script: Vec<Op>,
    pc: usize,
    phase: Phase,
    held: Option<usize>,
    pending: Option<usize>,
    /// Pins this actor holds (a pin whose restore ran out of memory holds none).
    pins: u8,
}

#[derive(Clone)]
struct World {
    entries: Vec<Option<Entry<usize>>>,
    /// Per range: its allocation and the version of the bytes in it.
    owner: [Option<usize>; RANGES],
    mem: [u8; RANGES],
    /// Per allocation: the version last written.
    expected: Vec<u8>,
    actors: Vec<Actor>,
    /// The mutant: a lease may run out once.
    expiry_left: bool,
    clock: u64,
}

type Key = (
    Vec<Option<(i64, u32, u32)>>,
    [Option<usize>; RANGES],
    [u8; RANGES],
    Vec<u8>,
    Vec<Actor>,
    bool,
);

impl World {
    fn key(&self) -> Key {
        let entries = self
            .entries
            .iter()
            .map(|e| {
                e.as_ref().map(|e| {
                    let (l, p) = e.holds();
                    let site = match &e.site {
                        Site::Device(r) => *r as i64,
                        Site::Host(b) => -1 - i64::from(b[0]),
                    };
                    (site, l, p)
                })
            })
            .collect();
        (
            entries,
            self.owner,
            self.mem,
            self.expected.clone(),
            self.actors.clone(),
            self.expiry_left,
        )
    }

    fn entry(&mut self, h: usize) -> Option<&mut Entry<usize>> {
        self.entries[h].as_mut()
    }

    /// `allocate_spilling` under the lock: a free range, or one freed by spilling a movable
    /// allocation (each choice is a branch). Empty when none is free or movable.
    fn allocate(&self, except: Option<usize>) -> Vec<World> {
        if let Some(r) = (0..RANGES).find(|&r| self.owner[r].is_none()) {
            let mut w = self.clone();
            w.owner[r] = Some(usize::MAX); // reserved, not yet an entry's
            return vec![w.with_pending(r)];
        }
        let mut out = Vec::new();
        for (v, e) in self.entries.iter().enumerate() {
            let Some(e) = e else { continue };
            if Some(v) == except || e.mobility(Ticket::DONE, Ticket::DONE) != Mobility::Movable {
                continue;
            }
            let mut w = self.clone();
            let r = e.device().unwrap();
            let bytes = vec![w.mem[r]];
            let freed = w
                .entry(v)
                .unwrap()
                .spilled(bytes, Ticket::DONE, Ticket::DONE)
                .unwrap();
            assert_eq!(freed, r);
            w.owner[r] = Some(usize::MAX);
            out.push(w.with_pending(r));
        }
        out
    }

    /// Marks the range `allocate` found as the current actor's pending one (set by `step`).
    fn with_pending(mut self, r: usize) -> World {
        self.mem[r] = self.mem[r].wrapping_add(100); // whatever was there
        self.clock = r as u64; // carried to `step`
        self
    }

    /// Whether any device entry is busy (a waiter may wait for it).
    fn busy(&self) -> bool {
        self.entries
            .iter()
            .flatten()
            .any(|e| e.mobility(Ticket::DONE, Ticket::DONE) == Mobility::Busy)
    }

    /// The successors of actor `i`'s next step; `stuck`: no one else can move, so a waiting
    /// allocation gives up (out of memory after `max_wait`).
    fn step(&self, i: usize, stuck: bool) -> Vec<World> {
        let a = &self.actors[i];
        let Some(&op) = a.script.get(a.pc) else {
            return vec![];
        };
        let mut w = self.clone();
        let next = |mut w: World, phase: Phase| {
            w.actors[i].phase = phase;
            w
        };
        let done = |mut w: World| {
            let a = &mut w.actors[i];
            a.pc += 1;
            a.phase = Phase::Start;
            a.held = None;
            a.pending = None;
            w
        };
        let h = match op {
            Op::Use { h, .. } | Op::Pin(h) | Op::Unpin(h) | Op::Alloc(h) | Op::Free(h) => h,
        };
        match (op, a.phase) {
            (Op::Unpin(_), _) => {
                let unpinned = w.entry(h).unwrap().unpin();
                if a.pins > 0 {
                    unpinned.expect("unpin after pin");
                    w.actors[i].pins -= 1;
                } else {
                    assert!(unpinned.is_err(), "unpin without a pin is refused");
                }
                vec![done(w)]
            }
            (Op::Free(_), _) => {
                // `None`: its allocation failed, the free is a stale handle's error.
                if let Some(r) = w.entries[h].take().and_then(|e| e.device()) {
                    w.owner[r] = None;
                }
                vec![done(w)]
            }
            (Op::Alloc(_), Phase::Start) | (_, Phase::RestoreAlloc) => {
                let except = (a.phase == Phase::RestoreAlloc).then_some(h);
                let found = w.allocate(except);
                if found.is_empty() {
                    if stuck || !self.busy() {
                        // Out of memory: a restore gives its lease back.
                        if let Some(e) = w.entry(h).filter(|_| except.is_some()) {
                            e.release();
                        }
                        return vec![done(w)];
                    }
                    return vec![];
                }
                let to = if except.is_some() {
                    Phase::RestoreFinish
                } else {
                    Phase::Insert
                };
                found
                    .into_iter()
                    .map(|mut w| {
                        w.actors[i].pending = Some(w.clock as usize);
                        next(w, to)
                    })
                    .collect()
            }
            (_, Phase::Insert) => {
                let r = a.pending.unwrap();
                w.clock += 1;
                w.entries[h] = Some(Entry::allocated(r, w.clock));
                w.owner[r] = Some(h);
                w.expected[h] = w.mem[r];
                w.actors[i].held = Some(r);
                vec![next(w, Phase::Release)]
            }
            (_, Phase::Start) => {
                w.clock += 1;
                let clock = w.clock;
                let Some(e) = w.entry(h) else {
                    return vec![done(w)]; // a stale handle: an error, nothing held
                };
                e.lease(clock).unwrap();
                match e.device() {
                    Some(r) => {
                        w.actors[i].held = Some(r);
                        vec![next(w, after_resolve(op))]
                    }
                    None => vec![next(w, Phase::RestoreAlloc)],
                }
            }
            (_, Phase::RestoreFinish) => {
                let r = a.pending.unwrap();
                let Some(e) = w.entries[h].as_mut() else {
                    w.owner[r] = None;
                    return vec![done(w)];
                };
                let held = match &e.site {
                    Site::Device(cur) => {
                        w.owner[r] = None;
                        *cur
                    }
                    Site::Host(bytes) => {
                        w.mem[r] = bytes[0];
                        e.restored(r);
                        w.owner[r] = Some(h);
                        r
                    }
                };
                w.actors[i].held = Some(held);
                vec![next(w, after_resolve(op))]
            }
            (_, Phase::Nested) => {
                w.clock += 1;
                let clock = w.clock;
                w.entry(h).unwrap().lease(clock).unwrap();
                let held = a.held.unwrap();
                assert_eq!(
                    w.entry(h).unwrap().device(),
                    Some(held),
                    "a leased range moved"
                );
                vec![next(w, Phase::NestedRelease)]
            }
            (_, Phase::NestedRelease) => {
                w.entry(h).unwrap().release();
                vec![next(w, Phase::Access)]
            }
            (Op::Use { write, .. }, Phase::Access) => {
                let r = a.held.unwrap();
                assert_eq!(
                    w.owner[r],
                    Some(h),
                    "actor {i} uses range {r} of another allocation"
                );
                if write {
                    w.mem[r] = w.mem[r].wrapping_add(1);
                    w.expected[h] = w.mem[r];
                } else {
                    assert_eq!(w.mem[r], w.expected[h], "actor {i} read stale bytes of {h}");
                }
                vec![next(w, Phase::Release)]
            }
            (Op::Pin(_), Phase::Access) => {
                let e = w.entry(h).unwrap();
                e.pin().unwrap();
                e.release();
                w.actors[i].pins += 1;
                vec![done(w)]
            }
            (_, Phase::Release) => {
                if let Some(e) = w.entry(h) {
                    e.release();
                }
                vec![done(w)]
            }
            (op, phase) => panic!("no step for {op:?} in {phase:?}"),
        }
    }

    /// The mutant's step: some lease ends by itself.
    fn expire(&self) -> Vec<World> {
        if !self.expiry_left {
            return vec![];
        }
        (0..self.entries.len())
            .filter(|&h| self.entries[h].as_ref().is_some_and(|e| e.holds().0 > 0))
            .map(|h| {
                let mut w = self.clone();
                w.entry(h).unwrap().release();
                w.expiry_left = false;
                w
            })
            .collect()
    }

    fn check(&self) {
        for (h, e) in self.entries.iter().enumerate() {
            let Some(e) = e else { continue };
            match &e.site {
                Site::Device(r) => {
                    assert_eq!(self.owner[*r], Some(h), "range {r} of {h}");
                    assert_eq!(self.mem[*r], self.expected[h], "bytes of {h} on the device");
                }
                Site::Host(b) => assert_eq!(b[0], self.expected[h], "bytes of {h} on the host"),
            }
        }
        for (r, o) in self.owner.iter().enumerate() {
            if let Some(h) = o.filter(|&h| h != usize::MAX) {
                assert_eq!(self.entries[h].as_ref().and_then(Entry::device), Some(r));
            }
        }
        if self.actors.iter().all(|a| a.pc == a.script.len()) {
            for e in self.entries.iter().flatten() {
                assert_eq!(e.holds(), (0, 0), "held after every actor finished");
            }
        }
    }
}

fn after_resolve(op: Op) -> Phase {
    match op {
        Op::Use { nested: true, .. } => Phase::Nested,
        _ => Phase::Access,
    }
}

/// Explores every interleaving; returns the number of states.
fn explore(scripts: Vec<Vec<Op>>, allocations: usize, expiry: bool) -> usize {
    // Allocation 0 on range 0, allocation 1 spilled; the rest are made by `Alloc`.
    let mut entries: Vec<Option<Entry<usize>>> = (0..allocations).map(|_| None).collect();
    let mut e0 = Entry::allocated(0, 0);
    e0.release();
    let mut e1 = Entry::allocated(1, 0);
    e1.release();
    e1.spilled(vec![7], Ticket::DONE, Ticket::DONE).unwrap();
    entries[0] = Some(e0);
    entries[1] = Some(e1);
    let mut expected = vec![0; allocations];
    expected[1] = 7;
    let start = World {
        entries,
        owner: [Some(0), None],
        mem: [0, 50],
        expected,
        actors: scripts
            .into_iter()
            .map(|script| Actor {
                script,
                pc: 0,
                phase: Phase::Start,
                held: None,
                pending: None,
                pins: 0,
            })
            .collect(),
        expiry_left: expiry,
        clock: 1,
    };
    let mut seen = HashSet::new();
    let mut stack = vec![start];
    while let Some(w) = stack.pop() {
        if !seen.insert(w.key()) {
            continue;
        }
        w.check();
        let mut next: Vec<World> = (0..w.actors.len()).flat_map(|i| w.step(i, false)).collect();
        next.extend(w.expire());
        if next.is_empty() {
            next = (0..w.actors.len()).flat_map(|i| w.step(i, true)).collect();
        }
        stack.extend(next);
    }
    seen.len()
}

fn scripts() -> Vec<Vec<Op>> {
    use Op::*;
    vec![
        // The owner of 0: a write with its nested read, a read, then a new allocation 2
        // (pressure) that it reads and frees.
        vec![
            Use {
                h: 0,
                write: true,
                nested: true,
            },
            Use {
                h: 0,
                write: false,
                nested: false,
            },
            Alloc(2),
            Use {
                h: 2,
                write: false,
                nested: false,
            },
            Free(2),
        ],
        // The owner of 1: pinned around a write, then a read.
        vec![
            Pin(1),
            Use {
                h: 1,
                write: true,
                nested: false,
            },
            Unpin(1),
            Use {
                h: 1,
                write: false,
                nested: true,
            },
        ],
        // A second user of 0 (a concurrent read).
        vec![
            Use {
                h: 0,
                write: false,
                nested: false,
            },
            Pin(0),
            Unpin(0),
        ],
    ]
}

#[test]
fn every_interleaving_of_three_actors_keeps_ranges_and_bytes() {
    let states = explore(scripts(), 3, false);
    assert!(states > 1000, "{states} states");
}

#[test]
fn every_interleaving_of_two_actors_keeps_ranges_and_bytes() {
    let mut s = scripts();
    s.truncate(2);
    explore(s, 3, false);
}

#[test]
fn a_lease_that_runs_out_is_caught() {
    let caught = std::panic::catch_unwind(|| explore(scripts(), 3, true));
    let message = caught.expect_err("a timed lease moved no range in use");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("of another allocation") || message.contains("moved"),
        "{message}"
    );
}
