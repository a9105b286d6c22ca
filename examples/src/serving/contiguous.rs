//! The contiguous policies: each running request holds one region for its whole life.
//!
//! `contiguous_max` reserves the model's maximum sequence length per request, as FasterTransformer
//! and Orca (Max) do; `contiguous_exact` knows each request's final length in advance and carves
//! exactly that from the runtime's TLSF sub-allocator over the budget (the best a non-paged cache
//! can do; what it still loses is the tail not yet generated and the fragmentation between
//! regions).

use tensormem::suballoc::{Region, Tlsf};

use super::policy::{KvPolicy, Preempted, Usage};

/// Regions are aligned like device bindings.
const ALIGN: u64 = 256;

/// How a contiguous policy sizes a region.
enum Sizing {
    /// Every region holds this many tokens.
    Max(u64),
    /// Each region holds its request's final length, carved from the budget by TLSF.
    Exact(Box<Tlsf>),
}

/// One request's region.
#[derive(Debug)]
struct Held {
    /// TLSF's region (exact sizing).
    region: Option<Region>,
    /// Bytes reserved.
    size: u64,
    /// Tokens stored.
    tokens: u64,
}

/// A contiguous KV cache policy.
pub struct Contiguous {
    name: &'static str,
    sizing: Sizing,
    budget: u64,
    token_bytes: u64,
    /// Per request: its region.
    held: Vec<Option<Held>>,
    held_bytes: u64,
    tokens: u64,
}

impl Contiguous {
    /// Regions of `max_seq` tokens each.
    pub fn max(budget: u64, token_bytes: u64, max_seq: u64, requests: usize) -> Self {
        Self::with(
            "contiguous_max",
            Sizing::Max(max_seq),
            budget,
            token_bytes,
            requests,
        )
    }

    /// Exact regions carved by TLSF.
    ///
    /// # Errors
    /// A budget TLSF cannot manage (zero).
    pub fn exact(budget: u64, token_bytes: u64, requests: usize) -> tensormem::Result<Self> {
        let tlsf = Tlsf::new(budget)?;
        Ok(Self::with(
            "contiguous_exact",
            Sizing::Exact(Box::new(tlsf)),
            budget,
            token_bytes,
            requests,
        ))
    }

    fn with(
        name: &'static str,
        sizing: Sizing,
        budget: u64,
        token_bytes: u64,
        requests: usize,
    ) -> Self {
        Contiguous {
            name,
            sizing,
            budget,
            token_bytes,
            held: (0..requests).map(|_| None).collect(),
            held_bytes: 0,
            tokens: 0,
        }
    }
}

impl KvPolicy for Contiguous {
    fn name(&self) -> &'static str {
        self.name
    }

    fn admit(
        &mut self,
        r: usize,
        tokens: &[u32],
        total: usize,
        _running: &[usize],
    ) -> Option<usize> {
        let (region, size) = match &mut self.sizing {
            Sizing::Max(max) => {
                let size = *max * self.token_bytes;
                if self.held_bytes + size > self.budget {
                    return None;
                }
                (None, size)
            }
            Sizing::Exact(tlsf) => {
                let size = (total as u64 * self.token_bytes).max(1);
                let region = tlsf.allocate(size, ALIGN).ok()??;
                (Some(region), size)
            }
        };
        self.held_bytes += size;
        self.tokens += tokens.len() as u64;
        self.held[r] = Some(Held {
            region,
            size,
            tokens: tokens.len() as u64,
        });
        Some(0)
    }

    fn append(&mut self, r: usize, _token: u32) -> bool {
        match &mut self.held[r] {
            Some(h) => {
                h.tokens += 1;
                self.tokens += 1;
                true
            }
            None => false,
        }
    }

    fn preempt(&mut self, r: usize) -> Preempted {
        self.finish(r);
        Preempted::Dropped
    }

    fn resume(&mut self, _r: usize, _running: &[usize]) -> Option<u64> {
        None
    }

    fn finish(&mut self, r: usize) {
        if let Some(h) = self.held[r].take() {
            self.held_bytes -= h.size;
            self.tokens -= h.tokens;
            if let (Sizing::Exact(tlsf), Some(region)) = (&mut self.sizing, h.region) {
                let _ = tlsf.free(region);
            }
        }
    }

    fn usage(&self) -> Usage {
        Usage {
            held_bytes: self.held_bytes,
            token_bytes: self.tokens * self.token_bytes,
        }
    }

    fn fits_alone(&self, total: usize) -> bool {
        let tokens = match self.sizing {
            Sizing::Max(max) => max,
            Sizing::Exact(_) => total as u64,
        };
        tokens.saturating_mul(self.token_bytes) <= self.budget
    }

    fn capacity_tokens(&self) -> u64 {
        self.budget / self.token_bytes
    }
}
