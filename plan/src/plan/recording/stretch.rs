//! A plan stretched to a run longer than any recorded: every slot gets room for the size its
//! allocation is predicted to grow to, and buffers the plan keeps apart stay apart.
//!
//! A shape's allocations grow with its first allocation (a sequence length), each at its own
//! rate: activations in proportion, attention scores without flash attention with its square, a
//! last logits row not at all. [`Growth`] fits each allocation's exponent to two runs of the
//! shape; without one, every allocation is taken to grow in proportion.
//!
//! The slots then move by a displacement `D` of the address: slot `[a, b)` becomes `[a + D(a),
//! b + D(b))`. `D` is nondecreasing, so two slots apart stay apart whether or not they live
//! together, and it is the least such function with `D(b) − D(a)` at least each slot's predicted
//! growth: a longest path up the address axis. The arena grows by the largest predicted growth
//! of any stack of slots, not by its size times the ratio.

use std::cmp::Ordering;

use super::{Event, Recording, ReplayPlan, allocations};

/// The largest exponent fitted: cubic (a volume in the first allocation's length). A larger fit
/// comes from sizes rounded up at small scales, and would stretch a slot far past its use.
const MAX_EXPONENT: f64 = 3.0;

/// How far under a whole number a fitted exponent is taken as that number: sizes rounded up to
/// their alignment in the shorter run pull an exponent just under it.
const SNAP: f64 = 0.05;

/// How each allocation of a shape grows with the shape's first allocation: `size ∝ first^e`,
/// one exponent `e` per allocation, fitted to two runs of the shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Growth {
    pub(super) exponents: Vec<f64>,
}

impl Growth {
    /// Fitted to two runs of one shape whose first allocations differ. An allocation of `s` bytes
    /// in the run whose first allocation is `S` and of `l` bytes in the one whose first is `L >
    /// S` gets `ln(l/s) / ln(L/S)`, at most cubic; one that did not grow gets 0. `None` when the
    /// shapes differ or the first allocations are equal. Linear in the events.
    pub fn between(a: &Recording, b: &Recording) -> Option<Growth> {
        if !a.same_shape(b) {
            return None;
        }
        let (first_a, first_b) = (a.sizes().next()?, b.sizes().next()?);
        let (small, large, span) = match first_a.cmp(&first_b) {
            Ordering::Less => (a, b, first_b as f64 / first_a as f64),
            Ordering::Greater => (b, a, first_a as f64 / first_b as f64),
            Ordering::Equal => return None,
        };
        let span = span.ln();
        let exponents = small
            .sizes()
            .zip(large.sizes())
            .map(|(s, l)| {
                if l <= s {
                    return 0.0;
                }
                let e = ((l as f64 / s as f64).ln() / span).min(MAX_EXPONENT);
                // Just under a whole exponent is a size rounded up in the shorter run (to its
                // alignment); the whole one predicts the longer runs exactly, in integers.
                let whole = e.ceil();
                if whole - e < SNAP { whole } else { e }
            })
            .collect();
        Some(Growth { exponents })
    }

    /// Allocation `ordinal`'s exponent; 1 (in proportion) for one the fitted runs lacked.
    pub fn exponent(&self, ordinal: usize) -> f64 {
        self.exponents.get(ordinal).copied().unwrap_or(1.0)
    }
}

/// Bytes an allocation of `size` in a run whose first allocation is `first` is predicted to take
/// in a run whose first allocation is `to`, growing with `exponent`. `None` past `u64`.
pub(super) fn predicted(size: u64, first: u64, to: u64, exponent: f64) -> Option<u64> {
    // A whole exponent in integers where they hold the powers: an allocation in proportion, or
    // with the square, gets exactly its bytes.
    if exponent.fract() == 0.0 && (0.0..=MAX_EXPONENT).contains(&exponent) {
        let power = |x: u64| u128::from(x).checked_pow(exponent as u32);
        if let Some(grown) = power(to)
            .and_then(|t| t.checked_mul(u128::from(size)))
            .zip(power(first))
            .map(|(n, d)| n.div_ceil(d))
        {
            return u64::try_from(grown).ok();
        }
    }
    // A relative margin over the float's rounding (about 1e-16 per operation).
    let grown = size as f64 * (to as f64 / first as f64).powf(exponent) * (1.0 + 1e-12);
    (grown < u64::MAX as f64).then(|| (grown.ceil() as u64).max(size))
}

/// One planned slot and the bytes it must gain.
struct Slot {
    start: u64,
    end: u64,
    /// Predicted growth, rounded up to the plan's largest alignment.
    gain: u64,
}

/// The least nondecreasing displacement `D` of the address with `D(end) ≥ D(start) + gain` for
/// every slot: per slot, `D` at its start and at its end, and `D` past every slot. `None` past
/// `u64`. O(n log n).
fn displacement(slots: &[Slot]) -> Option<(Vec<(u64, u64)>, u64)> {
    // Both ends of every slot by address; at one address the ends of slots (`false`) come
    // first, so a slot that starts where another ends starts past that one's growth.
    let mut marks: Vec<(u64, bool, usize)> = slots
        .iter()
        .enumerate()
        .flat_map(|(i, s)| [(s.start, true, i), (s.end, false, i)])
        .collect();
    marks.sort_unstable();
    let mut moved = vec![(0u64, 0u64); slots.len()];
    let mut d = 0u64;
    let mut at = 0;
    while at < marks.len() {
        let address = marks[at].0;
        let next = at + marks[at..].partition_point(|m| m.0 == address);
        for &(_, start, i) in &marks[at..next] {
            if !start {
                d = d.max(moved[i].0.checked_add(slots[i].gain)?);
            }
        }
        for &(_, start, i) in &marks[at..next] {
            if start {
                moved[i].0 = d;
            } else {
                moved[i].1 = d;
            }
        }
        at = next;
    }
    Some((moved, d))
}

impl ReplayPlan {
    /// This plan stretched for a run of its shape whose first allocation is `size` bytes, more
    /// than the plan's `first`: every slot gets room for its allocation grown by `growth` (in
    /// proportion to the first allocation without one), its start and end moved up by whole
    /// multiples of the plan's largest alignment, so buffers the plan keeps apart stay apart and
    /// aligned (module doc; the model-check test verifies it). No slot shrinks: the stretched
    /// plan serves every run the plan served. A run whose allocations grew as predicted follows
    /// it from its start instead of running dynamically, on an arena of the stretched peak; an
    /// allocation that grew faster makes the run diverge there. The lower bound is that of the
    /// predicted sizes. `None` when `size` is not larger than `first`, or an offset passes
    /// `u64`. O(n log n) in the allocations.
    pub fn stretched(&self, size: u64, growth: Option<&Growth>) -> Option<ReplayPlan> {
        let (first, _) = self.first_allocation()?;
        if size <= first {
            return None;
        }
        let unit = allocations(&self.events).map(|(_, align)| align).max()?;
        let mut slots = Vec::with_capacity(self.offsets.len());
        let mut grown = Vec::with_capacity(self.offsets.len());
        for e in &self.events {
            let Event::Allocate { size: s, .. } = *e else {
                continue;
            };
            let start = *self.offsets.get(slots.len())?;
            let exponent = growth.map_or(1.0, |g| g.exponent(slots.len()));
            let bytes = predicted(s, first, size, exponent)?;
            grown.push(bytes);
            slots.push(Slot {
                start,
                end: start.checked_add(s)?,
                gain: (bytes - s).checked_next_multiple_of(unit)?,
            });
        }
        let (moved, total) = displacement(&slots)?;
        let mut offsets = Vec::with_capacity(slots.len());
        let mut events = Vec::with_capacity(self.events.len());
        let (mut live, mut lower_bound) = (0u64, 0u64);
        for e in &self.events {
            match *e {
                Event::Allocate { align, .. } => {
                    let k = offsets.len();
                    let (slot, (at_start, at_end)) = (&slots[k], moved[k]);
                    let start = slot.start.checked_add(at_start)?;
                    offsets.push(start);
                    events.push(Event::Allocate {
                        size: slot.end.checked_add(at_end)? - start,
                        align,
                    });
                    live = live.checked_add(grown[k])?;
                    lower_bound = lower_bound.max(live);
                }
                Event::Free { ordinal } => {
                    live = live.checked_sub(*grown.get(ordinal as usize)?)?;
                    events.push(*e);
                }
            }
        }
        Some(ReplayPlan {
            events,
            offsets,
            arena_size: self.arena_size.checked_add(total)?,
            lower_bound,
            algorithm: format!("{} stretched by {size}/{first}", self.algorithm),
        })
    }
}
