//! Preemption of [`KvLedger`] sequences: releasing a sequence's blocks for a swap or for
//! recomputation, and bringing it back (a swap-in takes back the full blocks still cached and
//! restores only the rest).

use super::sequences::Admission;
use super::{KvLedger, Preemption, SeqId, SeqState};
use crate::kv::KvError;

/// What resuming a preempted sequence did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// The sequence and the tokens that need no recomputation.
    pub admission: Admission,
    /// Its block table.
    pub table: Vec<u32>,
    /// Indices into `table` (and into the host copy, in table order) of the blocks the storage
    /// must copy back; the other blocks were still cached.
    pub restore: Vec<usize>,
}

impl KvLedger {
    /// Preempts `id`, releasing its blocks. Returns the blocks in table order: for
    /// [`Preemption::Swap`] the storage copies them to host memory before any later write, and
    /// gets them back on [`KvLedger::resume`].
    ///
    /// # Errors
    /// An unknown, freed or already preempted sequence.
    pub fn preempt(&mut self, id: SeqId, how: Preemption) -> Result<Vec<u32>, KvError> {
        self.resident_ref(id, "a preemption")?;
        let seq = self.seq_mut(id)?;
        let blocks = std::mem::take(&mut seq.blocks);
        seq.state = match how {
            Preemption::Swap => SeqState::Swapped,
            Preemption::Recompute => SeqState::Dropped,
        };
        for &b in &blocks {
            self.release(b);
        }
        match how {
            Preemption::Swap => {
                self.stats.swap_outs += 1;
                self.stats.swapped_blocks += blocks.len() as u64;
            }
            Preemption::Recompute => self.stats.recomputes += 1,
        }
        Ok(blocks)
    }

    /// Brings a preempted sequence back. A swapped one takes its full blocks from the prefix
    /// cache where they are still cached (its own released blocks, or a prefix it shares) and new
    /// blocks for the rest, which the storage fills from its host copy: [`Resumed::restore`] lists
    /// them. A dropped one is admitted again over its tokens (prefix hits included) and the
    /// caller recomputes `tokens[cached_tokens..]`.
    ///
    /// # Errors
    /// An unknown, freed or resident sequence; [`KvError::OutOfBlocks`] (it stays preempted).
    pub fn resume(&mut self, id: SeqId) -> Result<Resumed, KvError> {
        let seq = self.seq(id)?;
        match seq.state {
            SeqState::Resident => Err(KvError::AlreadyResident { index: id.index }),
            SeqState::Dropped => {
                let cached_tokens = self.place(id)?;
                let table = self.seq(id)?.blocks.clone();
                Ok(Resumed {
                    admission: Admission {
                        seq: id,
                        cached_tokens,
                    },
                    table,
                    restore: Vec::new(),
                })
            }
            SeqState::Swapped => self.swap_in(id),
        }
    }

    /// [`KvLedger::resume`] of a swapped sequence.
    fn swap_in(&mut self, id: SeqId) -> Result<Resumed, KvError> {
        let bt = self.block_tokens as usize;
        let seq = self.seq(id)?;
        let n = seq.tokens.len();
        let need = n.div_ceil(bt);
        let mut hits = vec![None; need];
        let mut idle_hits = 0;
        for (c, &key) in seq.keys.iter().enumerate() {
            let parent = if c == 0 { seq.root } else { seq.keys[c - 1] };
            if let Some(b) = self
                .prefix
                .lookup(key, parent, &seq.tokens[c * bt..(c + 1) * bt])
            {
                idle_hits += usize::from(self.refs[b as usize] == 0);
                hits[c] = Some(b);
            }
        }
        let fresh = hits.iter().filter(|h| h.is_none()).count();
        if fresh > self.available() - idle_hits {
            return Err(self.error_out_of_blocks(fresh));
        }
        // Hits are held first: a new block may evict any idle cached block but these.
        for &b in hits.iter().flatten() {
            self.hold(b);
        }
        let mut table = Vec::with_capacity(need);
        let mut restore = Vec::with_capacity(fresh);
        for (c, hit) in hits.into_iter().enumerate() {
            let b = match hit {
                Some(b) => b,
                None => {
                    let b = self.take_block()?;
                    self.set_filled(b, (n - c * bt).min(bt) as u32);
                    restore.push(c);
                    b
                }
            };
            table.push(b);
        }
        self.stats.prefix_hits += (need - fresh) as u64;
        let seq = self.seq_mut(id)?;
        seq.blocks = table.clone();
        seq.state = SeqState::Resident;
        let (root, keys) = (seq.root, seq.keys.clone());
        // Restored full blocks hold their keys' tokens again: cache them for others.
        for &c in &restore {
            if c < keys.len() {
                let parent = if c == 0 { root } else { keys[c - 1] };
                let tokens = self.seq(id)?.tokens[c * bt..(c + 1) * bt].to_vec();
                self.prefix.insert(table[c], keys[c], parent, &tokens);
            }
        }
        self.stats.swap_ins += 1;
        self.stats.swapped_blocks += restore.len() as u64;
        Ok(Resumed {
            admission: Admission {
                seq: id,
                cached_tokens: n,
            },
            table,
            restore,
        })
    }
}
