//! The paged policies: requests hold blocks of a [`KvLedger`], taken as they fill.
//!
//! `paged` (tensormem's defaults, [`PagedConfig::default`]) takes 8-token blocks (half the tail
//! waste of 16), swaps a preempted request to host memory, admits a request only while the free
//! blocks cover what the running requests need to grow by `growth_reserve` tokens each (so
//! requests already decoding are rarely preempted by ones just admitted), and lets up to 16
//! later requests pass one that does not fit yet, at most 16 times (long prompts no longer hold
//! free memory idle behind them). `paged_vllm` ([`PagedConfig::VLLM`]) is the same ledger with
//! vLLM's defaults: 16-token blocks, recomputation, a 1% watermark, first come first served.
//! Both count only the blocks an admission takes: a prefix other requests hold costs nothing.

use tensormem::kv::{KvGeometry, KvLedger, Preemption, SeqId};

use super::policy::{KvPolicy, Preempted, Usage};

/// How a paged policy admits and preempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedConfig {
    /// Preempt by swapping (true) or by recomputation.
    pub swap: bool,
    /// When admitting, keep free the blocks the running requests need for this many more
    /// tokens each (0: vLLM's 1% watermark only).
    pub growth_reserve: usize,
    /// Admission look-ahead `(window, passes)` ([`KvPolicy::lookahead`]); `(0, 0)` is first
    /// come first served.
    pub lookahead: (usize, usize),
}

impl PagedConfig {
    /// vLLM's scheduler: recomputation, the watermark alone, first come first served.
    pub const VLLM: PagedConfig = PagedConfig {
        swap: false,
        growth_reserve: 0,
        lookahead: (0, 0),
    };
}

impl Default for PagedConfig {
    /// tensormem's defaults (module doc).
    fn default() -> Self {
        PagedConfig {
            swap: true,
            growth_reserve: 20,
            lookahead: (16, 16),
        }
    }
}

/// A paged KV cache policy over a [`KvLedger`].
pub struct Paged {
    name: &'static str,
    config: PagedConfig,
    ledger: KvLedger,
    block_bytes: u64,
    token_bytes: u64,
    seqs: Vec<Option<SeqId>>,
}

impl Paged {
    /// A policy over `budget` bytes of blocks of `geometry`, for `requests` requests.
    ///
    /// # Errors
    /// A budget below one block.
    pub fn new(
        name: &'static str,
        geometry: &KvGeometry,
        budget: u64,
        requests: usize,
        config: PagedConfig,
    ) -> tensormem::Result<Self> {
        let block_bytes = geometry.block_bytes();
        let blocks = budget / block_bytes;
        if blocks == 0 {
            return Err(tensormem::kv::KvError::BudgetBelowBlock {
                budget,
                block_bytes,
            }
            .into());
        }
        let ledger = KvLedger::new(
            geometry.block_tokens,
            geometry.max_seq as usize,
            blocks as usize,
        )?;
        Ok(Paged {
            name,
            config,
            ledger,
            block_bytes,
            token_bytes: geometry.token_bytes(),
            seqs: vec![None; requests],
        })
    }

    /// Free blocks the admission keeps back: the watermark, or what the running requests need
    /// to grow by `growth_reserve` tokens each, whichever is more.
    fn reserve(&self, running: &[usize]) -> usize {
        let watermark = self.ledger.capacity().div_ceil(100);
        let horizon = self.config.growth_reserve;
        if horizon == 0 {
            return watermark;
        }
        let bt = self.ledger.block_tokens() as usize;
        let need: usize = running
            .iter()
            .filter_map(|&r| self.seqs[r])
            .filter_map(|s| self.ledger.tokens(s).ok())
            .map(|t| {
                let room = (bt - t.len() % bt) % bt;
                horizon.saturating_sub(room).div_ceil(bt)
            })
            .sum();
        watermark.max(need)
    }

    /// Whether `blocks` new blocks fit beside the reserve (always, with nothing running).
    fn fits(&self, blocks: usize, running: &[usize]) -> bool {
        running.is_empty() || blocks + self.reserve(running) <= self.ledger.available()
    }
}

impl KvPolicy for Paged {
    fn name(&self) -> &'static str {
        self.name
    }

    fn admit(
        &mut self,
        r: usize,
        tokens: &[u32],
        _total: usize,
        running: &[usize],
    ) -> Option<usize> {
        // Blocks of a cached prefix other requests hold cost nothing (as vLLM counts them).
        if !self.fits(self.ledger.blocks_to_admit(tokens, 0), running) {
            return None;
        }
        let admission = self.ledger.admit(tokens, 0).ok()?;
        self.seqs[r] = Some(admission.seq);
        Some(admission.cached_tokens)
    }

    fn append(&mut self, r: usize, token: u32) -> bool {
        match self.seqs[r] {
            Some(seq) => {
                let ok = self.ledger.append(seq, token).is_ok();
                // The simulator moves no bytes: copies are counted by the ledger.
                let _ = self.ledger.take_copies();
                ok
            }
            None => false,
        }
    }

    fn lookahead(&self) -> (usize, usize) {
        self.config.lookahead
    }

    fn preempt(&mut self, r: usize) -> Preempted {
        let Some(seq) = self.seqs[r] else {
            return Preempted::Dropped;
        };
        if self.config.swap {
            let blocks = self
                .ledger
                .preempt(seq, Preemption::Swap)
                .map_or(0, |b| b.len());
            Preempted::Swapped {
                bytes: blocks as u64 * self.block_bytes,
            }
        } else {
            // A dropped request is admitted again as a new sequence over its tokens.
            let _ = self.ledger.free(seq);
            self.seqs[r] = None;
            Preempted::Dropped
        }
    }

    fn resume(&mut self, r: usize, running: &[usize]) -> Option<u64> {
        let seq = self.seqs[r]?;
        let need = self
            .ledger
            .tokens(seq)
            .ok()?
            .len()
            .div_ceil(self.ledger.block_tokens() as usize);
        if !self.fits(need, running) {
            return None;
        }
        let resumed = self.ledger.resume(seq).ok()?;
        Some(resumed.restore.len() as u64 * self.block_bytes)
    }

    fn finish(&mut self, r: usize) {
        if let Some(seq) = self.seqs[r].take() {
            let _ = self.ledger.free(seq);
        }
    }

    fn usage(&self) -> Usage {
        let s = self.ledger.stats();
        Usage {
            held_bytes: s.used_blocks as u64 * self.block_bytes,
            token_bytes: s.stored_tokens * self.token_bytes,
        }
    }

    fn fits_alone(&self, total: usize) -> bool {
        total.div_ceil(self.ledger.block_tokens() as usize) <= self.ledger.capacity()
    }

    fn capacity_tokens(&self) -> u64 {
        self.ledger.capacity() as u64 * u64::from(self.ledger.block_tokens())
    }

    fn prefix_hit_rate(&self) -> Option<f64> {
        Some(self.ledger.stats().prefix_hit_rate())
    }
}

impl Paged {
    /// The ledger's counters.
    pub fn stats(&self) -> tensormem::kv::KvStats {
        self.ledger.stats()
    }
}
