//! The exact worker of the portfolio: decision searches scheduled in resumable steps.
//!
//! Each step is one search run (one preorder, one node limit). The worker probes one capacity until
//! the probe is decided: the capacity the caller must decide first, else the proved lower bound
//! (perfect packings are common and cheapest to confirm), else the middle of the open range
//! (bisection). Runs rotate through the preorders and double the node limit after each round,
//! MiniMalloc's restart schedule. A minimisation probe that stays undecided for
//! [`GIVE_UP_ROUNDS`] rounds is abandoned so that higher capacities get a turn; the caller then
//! knows optimality is unproved.

use crate::time::Instant;

use super::{Infeasibility, Outcome, PREORDERS, Prepared};
use crate::plan::Buffer;

/// Restart rounds (each doubling the node limit) before an undecided minimisation probe is
/// abandoned: 2^14 times the first limit, i.e. tens of millions of nodes.
const GIVE_UP_ROUNDS: u32 = 14;

/// What one step of the worker established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A placement within `capacity` (offsets in input order).
    Found { capacity: u64, offsets: Vec<u64> },
    /// No placement within `capacity` exists.
    Proved {
        capacity: u64,
        reason: Infeasibility,
    },
    /// The probe at `capacity` was abandoned undecided.
    GaveUp { capacity: u64 },
    /// Nothing decided yet (the run hit its node limit, the deadline or the stop signal).
    Working,
}

/// The exact worker; see the module docs.
pub(crate) struct Prover {
    prepared: Prepared,
    /// The capacity being decided and the restart state of that probe.
    probe: Option<u64>,
    preorder: usize,
    /// The preorder each restart round starts from (the variant's).
    first_preorder: usize,
    node_limit: u64,
    rounds: u32,
    /// Whether a minimisation probe was already made (the first one goes to the lower bound).
    probed: bool,
}

impl Prover {
    /// A worker for valid `buffers`; `variant` rotates its preorders so parallel provers differ.
    pub fn new(buffers: &[Buffer], variant: usize) -> Self {
        let prepared = Prepared::new(buffers);
        let node_limit = prepared.initial_node_limit();
        Prover {
            prepared,
            probe: None,
            preorder: variant % PREORDERS,
            first_preorder: variant % PREORDERS,
            node_limit,
            rounds: 0,
            probed: false,
        }
    }

    /// The node limit of the next run (the portfolio sizes the other workers' steps by it).
    pub fn node_limit(&self) -> u64 {
        self.node_limit
    }

    /// Runs one search. `must_decide`: a capacity to decide before anything else. Otherwise the
    /// worker minimises within `[lo, hi]`: every capacity below `lo` is proved infeasible and a
    /// plan of peak `hi + 1` is known. Returns [`Event::Working`] at once when `lo > hi`.
    pub fn step(
        &mut self,
        must_decide: Option<u64>,
        lo: u64,
        hi: u64,
        deadline: Instant,
        stop: &dyn Fn() -> bool,
    ) -> Event {
        let wanted = match must_decide {
            Some(cap) => cap,
            None if lo > hi => return Event::Working,
            None => match self.probe {
                Some(p) if (lo..=hi).contains(&p) => p,
                _ if !self.probed => lo,
                _ => lo + (hi - lo) / 2,
            },
        };
        if self.probe != Some(wanted) {
            self.probe = Some(wanted);
            self.node_limit = self.prepared.initial_node_limit();
            self.rounds = 0;
            self.probed |= must_decide.is_none();
        }
        let outcome = self
            .prepared
            .run(wanted, self.preorder, self.node_limit, deadline, stop);
        match outcome {
            Outcome::Found(offsets) => {
                self.probe = None;
                Event::Found {
                    capacity: wanted,
                    offsets,
                }
            }
            Outcome::Infeasible(reason) => {
                self.probe = None;
                Event::Proved {
                    capacity: wanted,
                    reason,
                }
            }
            Outcome::Timeout => {
                if Instant::now() >= deadline || stop() {
                    return Event::Working;
                }
                self.preorder = (self.preorder + 1) % PREORDERS;
                if self.preorder == self.first_preorder {
                    self.node_limit = self.node_limit.saturating_mul(2);
                    self.rounds += 1;
                    if must_decide.is_none() && self.rounds >= GIVE_UP_ROUNDS {
                        self.probe = None;
                        return Event::GaveUp { capacity: wanted };
                    }
                }
                Event::Working
            }
        }
    }
}
