//! The sequence operations of [`KvLedger`]: admit, append, fork, truncate and free (preemption
//! is in `preemption.rs`). Each checks everything it needs before it changes anything, so a
//! refusal leaves the ledger as it was.

use super::{BlockCopy, KvLedger, Seq, SeqId, SeqSlot, SeqState, Slot};
use crate::kv::KvError;
use crate::kv::prefix::{block_key, root_key};

/// Freed sequences whose vectors are kept for reuse.
const SPARE_SEQS: usize = 64;

/// What admitting (or resuming) a sequence found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// The sequence.
    pub seq: SeqId,
    /// Leading tokens whose keys and values are already in cached blocks: the caller computes
    /// only the rest. Always less than the number of tokens, so the last token is computed.
    pub cached_tokens: usize,
}

impl KvLedger {
    /// Admits a sequence holding `tokens` (its prompt, or a first chunk of it), taking full
    /// blocks from the prefix cache where the same tokens after the same `salt` are cached, and
    /// new blocks for the rest. The caller writes the keys and values of
    /// `tokens[cached_tokens..]` into [`KvLedger::slot`]s.
    ///
    /// # Errors
    /// [`KvError::TooLong`] past the maximum length; [`KvError::OutOfBlocks`] if the blocks do
    /// not fit (nothing is taken).
    pub fn admit(&mut self, tokens: &[u32], salt: u64) -> Result<Admission, KvError> {
        let seq = Seq {
            state: SeqState::Dropped,
            root: root_key(salt),
            blocks: Vec::new(),
            tokens: tokens.to_vec(),
            keys: Vec::new(),
        };
        self.check_len(0, tokens.len())?;
        let id = self.insert_seq(seq);
        let index = id.index;
        match self.place(id) {
            Ok(cached_tokens) => {
                self.stats.sequences += 1;
                Ok(Admission {
                    seq: id,
                    cached_tokens,
                })
            }
            Err(e) => {
                self.slots[index as usize].seq = None;
                self.vacant.push(index);
                Err(e)
            }
        }
    }

    /// The available blocks ([`KvLedger::available`]) admitting `tokens` after `salt` would take
    /// now: a new block for each block not in the prefix cache, and the idle cached blocks it
    /// would hit (they leave the LRU). Blocks other sequences already hold cost nothing, so a
    /// scheduler that admits by this count admits prompts sharing a cached prefix that a count
    /// of all their blocks would refuse. Changes nothing: no hit or miss is counted.
    pub fn blocks_to_admit(&self, tokens: &[u32], salt: u64) -> usize {
        let bt = self.block_tokens as usize;
        let n = tokens.len();
        let lookable = n.saturating_sub(1) / bt;
        let (mut held_hits, mut parent) = (0, root_key(salt));
        for c in 0..lookable {
            let chunk = &tokens[c * bt..(c + 1) * bt];
            let key = block_key(parent, chunk);
            match self.prefix.lookup(key, parent, chunk) {
                Some(b) if self.refs[b as usize] > 0 => held_hits += 1,
                Some(_) => {}
                None => break,
            }
            parent = key;
        }
        n.div_ceil(bt) - held_hits
    }

    /// Gives a sequence whose tokens are set and blocks empty its blocks: prefix hits, then new.
    pub(super) fn place(&mut self, id: SeqId) -> Result<usize, KvError> {
        let bt = self.block_tokens as usize;
        let seq = self.seq_mut(id)?;
        let mut tokens = std::mem::take(&mut seq.tokens);
        let root = seq.root;
        let n = tokens.len();
        let need = n.div_ceil(bt);
        // Full blocks before the last token may come from the cache.
        let lookable = n.saturating_sub(1) / bt;
        let mut hits = Vec::new();
        let mut keys = Vec::with_capacity(n / bt);
        let mut parent = root;
        let mut idle_hits = 0;
        for c in 0..n / bt {
            let key = block_key(parent, &tokens[c * bt..(c + 1) * bt]);
            if c < lookable
                && hits.len() == c
                && let Some(b) = self
                    .prefix
                    .lookup(key, parent, &tokens[c * bt..(c + 1) * bt])
            {
                idle_hits += usize::from(self.refs[b as usize] == 0);
                hits.push(b);
            }
            keys.push(key);
            parent = key;
        }
        let fresh = need - hits.len();
        if fresh > self.available() - idle_hits {
            self.seq_mut(id)?.tokens = tokens;
            return Err(self.error_out_of_blocks(fresh));
        }
        self.stats.prefix_hits += hits.len() as u64;
        self.stats.prefix_misses += (lookable - hits.len()) as u64;
        let mut blocks = Vec::with_capacity(need);
        for &b in &hits {
            self.hold(b);
            blocks.push(b);
        }
        for c in hits.len()..need {
            let b = self.take_block()?;
            let filled = (n - c * bt).min(bt);
            self.set_filled(b, filled as u32);
            if filled == bt {
                self.prefix.insert(
                    b,
                    keys[c],
                    if c == 0 { root } else { keys[c - 1] },
                    &tokens[c * bt..(c + 1) * bt],
                );
            }
            blocks.push(b);
        }
        let cached = hits.len() * bt;
        let seq = self.seq_mut(id)?;
        std::mem::swap(&mut seq.tokens, &mut tokens);
        seq.blocks = blocks;
        seq.keys = keys;
        seq.state = SeqState::Resident;
        Ok(cached)
    }

    /// Appends one token and returns the slot its keys and values go to. O(1): a new block when
    /// the tail is full, a copy-on-write when the tail is shared (see
    /// [`KvLedger::take_copies`]), a key when the block fills.
    ///
    /// # Errors
    /// An unknown, freed or preempted sequence; [`KvError::TooLong`]; [`KvError::OutOfBlocks`]
    /// (nothing changes).
    #[inline]
    pub fn append(&mut self, id: SeqId, token: u32) -> Result<Slot, KvError> {
        let bt = self.block_tokens as usize;
        let max = self.max_seq;
        let seq = self.resident_ref(id, "an append")?;
        let len = seq.tokens.len();
        if len >= max {
            return Err(KvError::TooLong {
                len,
                adding: 1,
                max,
            });
        }
        let offset = len % bt;
        let block = if offset == 0 {
            if self.available() == 0 {
                return Err(self.error_out_of_blocks(1));
            }
            let b = self.take_block()?;
            self.seq_mut(id)?.blocks.push(b);
            b
        } else {
            let tail = *seq
                .blocks
                .last()
                .ok_or_else(|| KvError::Geometry("empty table".into()))?;
            if self.refs[tail as usize] > 1 {
                self.copy_tail(id, tail, offset)?
            } else {
                // A cached block is partial here only after a truncation cut into it while it
                // was shared: its cached contents are about to change.
                if self.prefix.is_cached(tail) {
                    self.prefix.forget(tail);
                }
                tail
            }
        };
        self.set_filled(block, offset as u32 + 1);
        let seq = self.seq_mut(id)?;
        seq.tokens.push(token);
        if offset + 1 == bt {
            self.seal(id, block)?;
        }
        Ok(Slot {
            block,
            offset: offset as u32,
        })
    }

    /// Replaces the shared tail `tail` of `id` by a private copy of its first `offset` slots.
    #[cold]
    fn copy_tail(&mut self, id: SeqId, tail: u32, offset: usize) -> Result<u32, KvError> {
        if self.available() == 0 {
            return Err(self.error_out_of_blocks(1));
        }
        let b = self.take_block()?;
        self.set_filled(b, offset as u32);
        self.release(tail);
        self.copies.push(BlockCopy {
            src: tail,
            dst: b,
            tokens: offset as u32,
        });
        self.stats.cow_copies += 1;
        if let Some(last) = self.seq_mut(id)?.blocks.last_mut() {
            *last = b;
        }
        Ok(b)
    }

    /// Keys the sequence's newly full tail `block` and caches it.
    fn seal(&mut self, id: SeqId, block: u32) -> Result<(), KvError> {
        let bt = self.block_tokens as usize;
        let slot = &mut self.slots[id.index as usize];
        let seq = slot
            .seq
            .as_mut()
            .ok_or(KvError::UnknownSequence { index: id.index })?;
        let c = seq.keys.len();
        let parent = if c == 0 { seq.root } else { seq.keys[c - 1] };
        let chunk = &seq.tokens[c * bt..(c + 1) * bt];
        let key = block_key(parent, chunk);
        if !self.prefix.is_cached(block) {
            self.prefix.insert(block, key, parent, chunk);
        }
        seq.keys.push(key);
        Ok(())
    }

    /// A new sequence sharing every block of `id` (copy-on-write on the first write into a
    /// shared block). O(blocks).
    ///
    /// # Errors
    /// An unknown, freed or preempted sequence.
    pub fn fork(&mut self, id: SeqId) -> Result<SeqId, KvError> {
        self.resident_ref(id, "a fork")?;
        // A freed sequence's vectors are reused: a fork allocates nothing in steady state.
        let mut child = self.spare.pop().unwrap_or_default();
        let parent = self.resident_ref(id, "a fork")?;
        child.state = parent.state;
        child.root = parent.root;
        child.blocks.clone_from(&parent.blocks);
        child.tokens.clone_from(&parent.tokens);
        child.keys.clone_from(&parent.keys);
        for &b in &child.blocks {
            self.refs[b as usize] += 1;
        }
        self.stats.sequences += 1;
        Ok(self.insert_seq(child))
    }

    /// Shortens `id` to `len` tokens (rejected speculative tokens), releasing the blocks past it.
    /// A cached block the cut falls inside is forgotten by the cache if this sequence alone holds
    /// it (its slots will be overwritten), and copied on the next write if it is shared.
    ///
    /// # Errors
    /// An unknown, freed or preempted sequence; [`KvError::TruncateBeyondEnd`].
    pub fn truncate(&mut self, id: SeqId, len: usize) -> Result<(), KvError> {
        let bt = self.block_tokens as usize;
        let seq = self.resident_ref(id, "a truncation")?;
        if len > seq.tokens.len() {
            return Err(KvError::TruncateBeyondEnd {
                len: seq.tokens.len(),
                to: len,
            });
        }
        let seq = self.seq_mut(id)?;
        seq.tokens.truncate(len);
        seq.keys.truncate(len / bt);
        let cut: Vec<u32> = seq.blocks.split_off(len.div_ceil(bt));
        let tail = (!len.is_multiple_of(bt))
            .then(|| seq.blocks.last().copied())
            .flatten();
        for b in cut {
            self.release(b);
        }
        if let Some(t) = tail
            && self.refs[t as usize] == 1
        {
            self.prefix.forget(t);
            self.set_filled(t, (len % bt) as u32);
        }
        Ok(())
    }

    /// Frees `id`: its blocks are released (full ones stay cached until evicted).
    ///
    /// # Errors
    /// An unknown id; [`KvError::FreedSequence`] for a double free.
    pub fn free(&mut self, id: SeqId) -> Result<(), KvError> {
        let mut seq = self.take_seq(id)?;
        if seq.state == SeqState::Resident {
            for &b in &seq.blocks {
                self.release(b);
            }
        }
        self.stats.sequences -= 1;
        if self.spare.len() < SPARE_SEQS {
            seq.blocks.clear();
            seq.tokens.clear();
            seq.keys.clear();
            self.spare.push(seq);
        }
        Ok(())
    }

    /// The slot of token `pos` of `id`.
    ///
    /// # Errors
    /// An unknown, freed or preempted sequence; [`KvError::TruncateBeyondEnd`] past its end.
    pub fn slot(&self, id: SeqId, pos: usize) -> Result<Slot, KvError> {
        let bt = self.block_tokens as usize;
        let seq = self.resident_ref(id, "a slot lookup")?;
        if pos >= seq.tokens.len() {
            return Err(KvError::TruncateBeyondEnd {
                len: seq.tokens.len(),
                to: pos + 1,
            });
        }
        Ok(Slot {
            block: seq.blocks[pos / bt],
            offset: (pos % bt) as u32,
        })
    }

    /// The block table of `id` (empty while preempted).
    pub fn table(&self, id: SeqId) -> Result<&[u32], KvError> {
        Ok(&self.seq(id)?.blocks)
    }

    /// The block table of resident `id`.
    ///
    /// # Errors
    /// An unknown, freed or preempted sequence.
    pub fn resident_blocks(&self, id: SeqId) -> Result<&[u32], KvError> {
        Ok(&self.resident_ref(id, "reading its blocks")?.blocks)
    }

    /// The tokens of `id`.
    pub fn tokens(&self, id: SeqId) -> Result<&[u32], KvError> {
        Ok(&self.seq(id)?.tokens)
    }

    /// Where `id`'s keys and values are.
    pub fn state(&self, id: SeqId) -> Result<SeqState, KvError> {
        Ok(self.seq(id)?.state)
    }

    /// Blocks the next append to `id` takes (0 or 1).
    pub fn blocks_for_append(&self, id: SeqId) -> Result<usize, KvError> {
        let bt = self.block_tokens as usize;
        let seq = self.resident_ref(id, "an append")?;
        let shared_tail = seq
            .blocks
            .last()
            .is_some_and(|&b| self.refs[b as usize] > 1);
        Ok(usize::from(
            seq.tokens.len().is_multiple_of(bt) || shared_tail,
        ))
    }

    /// Stores `seq` in a vacant slot (or a new one) and returns its id.
    fn insert_seq(&mut self, seq: Seq) -> SeqId {
        let index = self.vacant.pop().unwrap_or_else(|| {
            self.slots.push(SeqSlot {
                generation: 0,
                seq: None,
            });
            (self.slots.len() - 1) as u32
        });
        let slot = &mut self.slots[index as usize];
        slot.seq = Some(seq);
        SeqId {
            index,
            generation: slot.generation,
        }
    }

    fn check_len(&self, len: usize, adding: usize) -> Result<(), KvError> {
        if len + adding > self.max_seq {
            return Err(KvError::TooLong {
                len,
                adding,
                max: self.max_seq,
            });
        }
        Ok(())
    }

    pub(crate) fn seq(&self, id: SeqId) -> Result<&Seq, KvError> {
        let slot = self
            .slots
            .get(id.index as usize)
            .ok_or(KvError::UnknownSequence { index: id.index })?;
        match &slot.seq {
            Some(s) if slot.generation == id.generation => Ok(s),
            _ => Err(KvError::FreedSequence {
                index: id.index,
                generation: id.generation,
            }),
        }
    }

    pub(super) fn seq_mut(&mut self, id: SeqId) -> Result<&mut Seq, KvError> {
        let slot = self
            .slots
            .get_mut(id.index as usize)
            .ok_or(KvError::UnknownSequence { index: id.index })?;
        match &mut slot.seq {
            Some(s) if slot.generation == id.generation => Ok(s),
            _ => Err(KvError::FreedSequence {
                index: id.index,
                generation: id.generation,
            }),
        }
    }

    pub(super) fn resident_ref(&self, id: SeqId, what: &'static str) -> Result<&Seq, KvError> {
        let seq = self.seq(id)?;
        match seq.state {
            SeqState::Resident => Ok(seq),
            SeqState::Swapped => Err(KvError::NotResident {
                index: id.index,
                state: "swapped out",
                what,
            }),
            SeqState::Dropped => Err(KvError::NotResident {
                index: id.index,
                state: "dropped for recomputation",
                what,
            }),
        }
    }

    fn take_seq(&mut self, id: SeqId) -> Result<Seq, KvError> {
        self.seq(id)?;
        let slot = &mut self.slots[id.index as usize];
        let seq = slot
            .seq
            .take()
            .ok_or(KvError::UnknownSequence { index: id.index })?;
        slot.generation = slot.generation.wrapping_add(1);
        self.vacant.push(id.index);
        Ok(seq)
    }
}
