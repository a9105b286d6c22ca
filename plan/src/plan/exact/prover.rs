//! The exact worker of the portfolio: decision searches scheduled in resumable steps.
//!
//! Each step is one search run (one preorder, one node limit). The worker probes one capacity until
//! the probe is decided: the capacity the caller must decide first, else the proved lower bound
//! (perfect packings are common and cheapest to confirm), else the middle of the open range
//! (bisection). Runs rotate through the worker's share of the preorders (parallel workers deal
//! them out) and double the node limit after each round, MiniMalloc's restart schedule. A minimisation probe that stays undecided for
//! [`GIVE_UP_ROUNDS`] rounds is abandoned so that higher capacities get a turn; the caller then
//! knows optimality is unproved.
//!
//! Each probe starts with one run of the canonical search alone, at the first node limit (what
//! MiniMalloc does first), before that schedule: the static runs decide exactly-full parts by
//! exact cover (`tiling`), whose nodes cost far more than a canonical node (`tiling` allows up to
//! about 10 ms a node), and where the canonical search finds a plan at once the exact cover's
//! first run would be most of the time (`docs/decisions/planner-tuning.md`).

use crate::time::Instant;

use super::memo::MAX_ENTRIES;
use super::{Infeasibility, Memo, Outcome, PREORDERS, Prepared};
use crate::plan::Buffer;
use crate::plan::rng::Rng;

/// Restart rounds (each doubling the node limit) before an undecided minimisation probe is
/// abandoned: 2^14 times the first limit, i.e. tens of millions of nodes.
const GIVE_UP_ROUNDS: u32 = 14;

/// Failures a prover's static-preorder memos keep together (three default memos' worth), split
/// evenly among the preorders of its share so that more preorders do not mean more memory.
const MEMO_ENTRIES: usize = 3 * MAX_ENTRIES;

/// Adjacent-rank swaps that randomise a preorder, per buffer.
const SHUFFLE_SWAPS_PER_BUFFER: usize = 1;

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
    /// Provers side by side: a round takes every `stride`-th preorder from `first_preorder`.
    stride: usize,
    node_limit: u64,
    rounds: u32,
    /// Whether a minimisation probe was already made (the first one goes to the lower bound).
    probed: bool,
    /// Runs of the current probe; every second one uses a randomised preorder.
    runs: u64,
    /// Whether the probe's first run, the canonical search alone, is still to come.
    prelude: bool,
    rng: Rng,
    /// Scratch: the randomised preorder (rank per buffer) and its order.
    random_rank: Vec<u32>,
    random_order: Vec<u32>,
    /// Failures proved at the probe's capacity, per static preorder (kept across its restarts),
    /// and a scratch memo for the randomised runs (each run has its own rank).
    memos: [Memo; PREORDERS],
    scratch_memo: Memo,
    /// The exact-cover search's failures at the probe's capacity (the static runs decide
    /// exactly-full parts with it; the randomised ones leave them to the canonical search).
    tiling_memo: Memo,
}

/// The Luby sequence 1, 1, 2, 1, 1, 2, 4, 1, ... (`i >= 1`): restart lengths whose total is
/// within a log factor of the best fixed length for any runtime distribution (Luby, Sinclair and
/// Zuckerman 1993).
fn luby(mut i: u64) -> u64 {
    loop {
        let k = 64 - i.leading_zeros(); // 2^(k-1) <= i < 2^k
        if i == (1u64 << k) - 1 {
            return 1 << (k - 1);
        }
        i -= (1 << (k - 1)) - 1;
    }
}

/// The preorder after `preorder` in a round that takes every `stride`-th one, or `None` when the
/// round is over.
fn next_in_round(preorder: usize, stride: usize) -> Option<usize> {
    let next = preorder + stride;
    (next < PREORDERS).then_some(next)
}

impl Prover {
    /// A worker for valid `buffers`, prover `variant` of `provers` running side by side: the
    /// static preorders are dealt out among them (variant `v` takes `v`, `v + provers`, ...), so
    /// parallel provers differ.
    pub fn new(buffers: &[Buffer], variant: usize, provers: usize) -> Self {
        let prepared = Prepared::new(buffers);
        let node_limit = prepared.initial_node_limit();
        Prover {
            prepared,
            probe: None,
            preorder: variant % PREORDERS,
            first_preorder: variant % PREORDERS,
            stride: provers.clamp(1, PREORDERS),
            node_limit,
            rounds: 0,
            probed: false,
            runs: 0,
            prelude: false,
            rng: Rng::new(0x0e7a_c75e_a2c4 ^ variant as u64),
            random_rank: Vec::new(),
            random_order: Vec::new(),
            memos: std::array::from_fn(|_| {
                let share = PREORDERS.div_ceil(provers.clamp(1, PREORDERS));
                Memo::with_limit(MEMO_ENTRIES / share)
            }),
            scratch_memo: Memo::default(),
            tiling_memo: Memo::default(),
        }
    }

    /// A fresh randomised preorder: one of the static ones with random swaps of buffers a few
    /// ranks apart. Backtracking search times are heavy-tailed; restarts under randomised orders
    /// cut the tail where the fixed preorders all go wrong early (Gomes, Selman and Kautz,
    /// "Boosting combinatorial search through randomization", AAAI 1998).
    fn shuffle(&mut self) {
        let n = self.prepared.len();
        let base = self
            .prepared
            .rank(self.rng.below(PREORDERS as u64) as usize);
        self.random_order.clear();
        self.random_order.resize(n, 0);
        for (i, &r) in base.iter().enumerate() {
            self.random_order[r as usize] = i as u32;
        }
        if n > 1 {
            for _ in 0..n * SHUFFLE_SWAPS_PER_BUFFER {
                let a = self.rng.below(n as u64 - 1) as usize;
                let b = (a + 1 + self.rng.below(4) as usize).min(n - 1);
                self.random_order.swap(a, b);
            }
        }
        self.random_rank.clear();
        self.random_rank.resize(n, 0);
        for (r, &i) in self.random_order.iter().enumerate() {
            self.random_rank[i as usize] = r as u32;
        }
        self.prepared.order_twins(&mut self.random_rank);
    }

    /// Search nodes of every run so far.
    pub fn nodes(&self) -> u64 {
        self.prepared.nodes()
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
            self.runs = 0;
            self.prelude = true;
            self.probed |= must_decide.is_none();
            self.memos.iter_mut().for_each(Memo::clear);
            self.tiling_memo.clear();
        }
        let prelude = std::mem::take(&mut self.prelude);
        if !prelude {
            self.runs += 1;
        }
        // Every second run after the prelude: a randomised preorder for a Luby-sized slice.
        let random = !prelude && self.runs.is_multiple_of(2);
        let outcome = if prelude {
            self.prepared.run(
                wanted,
                self.preorder,
                self.prepared.initial_node_limit(),
                deadline,
                stop,
                &mut self.memos[self.preorder],
                None,
            )
        } else if random {
            self.shuffle();
            let limit = self.prepared.initial_node_limit() * luby(self.runs / 2);
            self.scratch_memo.clear();
            self.prepared.run_ranked(
                wanted,
                &self.random_rank,
                limit,
                deadline,
                stop,
                &mut self.scratch_memo,
            )
        } else {
            self.prepared.run(
                wanted,
                self.preorder,
                self.node_limit,
                deadline,
                stop,
                &mut self.memos[self.preorder],
                Some((&mut self.tiling_memo, self.runs / 2)),
            )
        };
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
                if prelude || random || Instant::now() >= deadline || stop() {
                    return Event::Working;
                }
                if let Some(next) = next_in_round(self.preorder, self.stride) {
                    self.preorder = next;
                } else {
                    self.preorder = self.first_preorder;
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

#[cfg(test)]
mod tests {
    use super::{PREORDERS, luby, next_in_round};

    /// Parallel provers deal the preorders out: each runs exactly once per round, in one prover.
    #[test]
    fn provers_share_the_preorders_out() {
        for provers in 1..=3 {
            let mut seen = vec![0; PREORDERS];
            for variant in 0..provers {
                let mut p = Some(variant);
                while let Some(q) = p {
                    seen[q] += 1;
                    p = next_in_round(q, provers);
                }
            }
            assert_eq!(seen, vec![1; PREORDERS], "{provers} provers");
        }
    }

    #[test]
    fn luby_sequence() {
        let got: Vec<u64> = (1..=15).map(luby).collect();
        assert_eq!(got, [1, 1, 2, 1, 1, 2, 4, 1, 1, 2, 1, 1, 2, 4, 8]);
    }
}
