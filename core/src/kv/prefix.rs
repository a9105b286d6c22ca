//! The prefix cache: full blocks keyed by a chained hash of their tokens, found again by later
//! sequences with the same prefix, and an LRU of the cached blocks no sequence holds.
//!
//! A block's key is `hash(parent key, its tokens)`; the first block's parent is the root, a hash
//! of the sequence's salt, so two tenants with different salts never share blocks. The key
//! identifies the whole prefix up to the block's end, as in vLLM's automatic prefix caching.
//! Keys are 64-bit; each cached block also keeps its parent key and tokens, and a lookup compares
//! them, so a hash collision is a miss, never another sequence's keys and values.
//!
//! The LRU is an intrusive doubly-linked list over block indices (two `u32` per block): insert,
//! remove and pop-oldest are O(1) and allocate nothing. A cached block stays in memory until a
//! block is needed and none is free; then the least recently released is evicted.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const NIL: u32 = u32::MAX;

/// The chain's root for a salt (0 when the sequence has none).
pub fn root_key(salt: u64) -> u64 {
    mix(0x243f_6a88_85a3_08d3 ^ mix(salt ^ 0x1319_8a2e_0370_7344))
}

/// The key of a full block: its parent's key and its tokens.
#[inline]
pub fn block_key(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = parent ^ (tokens.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut pairs = tokens.chunks_exact(2);
    for p in &mut pairs {
        h = mix(h ^ (u64::from(p[0]) | (u64::from(p[1]) << 32)));
    }
    if let [last] = pairs.remainder() {
        h = mix(h ^ u64::from(*last));
    }
    mix(h)
}

/// A folded 64×64→128-bit multiply (wyhash's mixer): every input bit reaches every output bit.
#[inline]
fn mix(x: u64) -> u64 {
    let m = u128::from(x ^ 0xa076_1d64_78bd_642f) * u128::from(0xe703_7ed1_a0b4_28db_u64);
    (m as u64) ^ ((m >> 64) as u64)
}

/// Keys are already hashes: the map uses them as they are.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Cached blocks by key, with the LRU of those no sequence references.
pub(crate) struct PrefixCache {
    block_tokens: usize,
    map: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    /// Per block: its key while cached.
    key: Vec<Option<u64>>,
    /// Per block: the parent key it was cached under.
    parent: Vec<u64>,
    /// Per block: its tokens, `block_tokens` each.
    tokens: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    lru_len: usize,
}

impl PrefixCache {
    pub(crate) fn new(block_tokens: usize) -> Self {
        PrefixCache {
            block_tokens,
            map: HashMap::default(),
            key: Vec::new(),
            parent: Vec::new(),
            tokens: Vec::new(),
            prev: Vec::new(),
            next: Vec::new(),
            head: NIL,
            tail: NIL,
            lru_len: 0,
        }
    }

    /// Makes room for `blocks` blocks in total.
    pub(crate) fn grow(&mut self, blocks: usize) {
        self.key.resize(blocks, None);
        self.parent.resize(blocks, 0);
        self.tokens.resize(blocks * self.block_tokens, 0);
        self.prev.resize(blocks, NIL);
        self.next.resize(blocks, NIL);
    }

    /// The cached block holding exactly `tokens` after the prefix `parent`, if any.
    #[inline]
    pub(crate) fn lookup(&self, key: u64, parent: u64, tokens: &[u32]) -> Option<u32> {
        let &b = self.map.get(&key)?;
        let i = b as usize;
        let start = i * self.block_tokens;
        (self.parent[i] == parent && self.tokens[start..start + self.block_tokens] == *tokens)
            .then_some(b)
    }

    /// Caches full block `b` under `key`. A key already cached keeps its block (the first copy
    /// of a prefix serves later lookups); returns whether `b` was cached.
    pub(crate) fn insert(&mut self, b: u32, key: u64, parent: u64, tokens: &[u32]) -> bool {
        if self.map.contains_key(&key) {
            return false;
        }
        let i = b as usize;
        self.map.insert(key, b);
        self.key[i] = Some(key);
        self.parent[i] = parent;
        let start = i * self.block_tokens;
        self.tokens[start..start + self.block_tokens].copy_from_slice(tokens);
        true
    }

    /// Whether block `b` is cached.
    #[inline]
    pub(crate) fn is_cached(&self, b: u32) -> bool {
        self.key[b as usize].is_some()
    }

    /// Forgets block `b` (its contents are about to change or it was evicted). It must not be
    /// in the LRU.
    pub(crate) fn forget(&mut self, b: u32) {
        if let Some(key) = self.key[b as usize].take() {
            self.map.remove(&key);
        }
    }

    /// Blocks in the LRU (cached, referenced by no sequence).
    pub(crate) fn lru_len(&self) -> usize {
        self.lru_len
    }

    /// Appends `b` as the most recently released.
    pub(crate) fn push_lru(&mut self, b: u32) {
        let i = b as usize;
        self.prev[i] = self.tail;
        self.next[i] = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.next[self.tail as usize] = b;
        }
        self.tail = b;
        self.lru_len += 1;
    }

    /// Takes `b` out of the LRU (a sequence references it again).
    pub(crate) fn remove_lru(&mut self, b: u32) {
        let i = b as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.lru_len -= 1;
    }

    /// Evicts the least recently released block: forgotten and returned for reuse.
    pub(crate) fn evict_oldest(&mut self) -> Option<u32> {
        let b = self.head;
        if b == NIL {
            return None;
        }
        self.remove_lru(b);
        self.forget(b);
        Some(b)
    }
}
