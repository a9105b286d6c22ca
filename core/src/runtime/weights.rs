//! The runtime's weight store: every weight uploaded once, shared by every model compiled on the
//! runtime, freed with the last model that uses it.
//!
//! Weights are most of an inference app's device memory, and an app compiles one model per input
//! shape (MiniLM at batch × sequence shapes): giving each compiled model its own copy multiplies
//! the largest cost by the number of shapes. So weights do not belong to a model. A model binds
//! each of its weight tensors to a store entry keyed by [`WeightKey`] (name, dtype, byte size and
//! a hash of the bytes); a second model binding the same key shares the entry's device bytes and
//! uploads nothing. Entries are reference-counted: [`Model`](crate::Model)'s drop releases its
//! references, and the last release frees the device allocation (deferred, like every free, until
//! the work that read it completes).
//!
//! The key holds the name *and* the content hash: two tensors with equal bytes but different
//! names (two zero biases) stay separate, so a model never reads a tensor it did not name, and a
//! file re-exported with new values under the same names gets new entries instead of stale ones.
//! The hash is SipHash-1-3 (std's `DefaultHasher`, fixed keys): not cryptographic, but equal name,
//! dtype and size *and* a 64-bit hash collision between two weights of one process is not a
//! practical risk. It is computed from the bytes the caller uploads (about 1.5 GB/s), or supplied
//! by a caller that hashed them already ([`Model::set_weight_hashed`](crate::Model::set_weight_hashed))
//! so a second shape binds its weights without touching them.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::backend::Ticket;
use crate::ops::DType;
use crate::runtime::Runtime;
use crate::runtime::segments::Segments;
use crate::{Error, Result};

/// Identity of a weight in the store: name, element type, byte size and content hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WeightKey {
    /// The weight tensor's name in its graph (the name in the weight file).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Size in bytes (unpadded).
    pub size: u64,
    /// [`WeightHasher`] hash of the bytes.
    pub hash: u64,
}

/// Streaming content hash of a weight's bytes: feeding the bytes in any chunking gives the same
/// hash as [`content_hash`] of the whole.
#[derive(Clone, Debug, Default)]
pub struct WeightHasher(DefaultHasher);

impl WeightHasher {
    /// A hasher with no bytes fed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    /// The hash of every byte fed so far.
    pub fn finish(&self) -> u64 {
        self.0.finish()
    }
}

/// The store hash of `bytes` (as [`WeightHasher`] fed with them).
pub fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = WeightHasher::new();
    h.update(bytes);
    h.finish()
}

/// One stored weight.
#[derive(Debug)]
struct Entry {
    segments: Segments,
    /// Allocated bytes (the key's size padded to the copy alignment).
    padded: u64,
    /// Bindings by live models; the entry is removed when this reaches 0 (never stored at 0).
    refs: usize,
}

/// The weights of one runtime (see the module doc).
#[derive(Debug, Default)]
pub struct WeightStore {
    entries: Mutex<HashMap<WeightKey, Entry>>,
}

/// What the store holds now. Sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightStoreReport {
    /// Stored weights.
    pub tensors: usize,
    /// Device bytes the store holds: each weight once.
    pub bytes: u64,
    /// Sum over every model binding of the weight's bytes: what per-model copies would hold.
    pub referenced_bytes: u64,
    /// Model bindings of stored weights.
    pub references: usize,
    /// `bytes` per element type, in [`DType`] declaration order, types with no weight left out.
    pub bytes_by_dtype: Vec<(DType, u64)>,
}

impl WeightStore {
    fn lock(&self) -> MutexGuard<'_, HashMap<WeightKey, Entry>> {
        // A panic while the map was held left it consistent (every update is one insert/remove).
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current contents.
    pub fn report(&self) -> WeightStoreReport {
        let entries = self.lock();
        let mut r = WeightStoreReport {
            tensors: entries.len(),
            ..WeightStoreReport::default()
        };
        for (key, e) in entries.iter() {
            r.bytes += e.padded;
            r.referenced_bytes += e.padded * e.refs as u64;
            r.references += e.refs;
            match r.bytes_by_dtype.iter_mut().find(|(d, _)| *d == key.dtype) {
                Some((_, b)) => *b += e.padded,
                None => r.bytes_by_dtype.push((key.dtype, e.padded)),
            }
        }
        r.bytes_by_dtype.sort_by_key(|(d, _)| *d as u8);
        r
    }
}

impl Runtime {
    /// The weight store shared by this runtime's models.
    pub fn weights(&self) -> &WeightStore {
        &self.inner.weights
    }

    /// One more reference to `key` when the store holds it (nothing is uploaded), else `None`:
    /// the caller allocates, uploads, then [`Runtime::store_weight`]s.
    pub(crate) fn share_weight(&self, key: &WeightKey) -> Option<Segments> {
        let mut entries = self.weights().lock();
        let e = entries.get_mut(key)?;
        e.refs += 1;
        Some(e.segments.clone())
    }

    /// Stores `segments` (`padded` bytes in one allocation, or in segments for a weight larger
    /// than a block; its upload queued) under `key` with one reference and returns them. The store is not locked during the upload (an awaited upload may yield to other
    /// tasks), so an entry is only visible once its bytes are queued: a concurrent binding of the
    /// same key either shares a complete entry or uploads its own. When one was stored meanwhile,
    /// that one is shared and `segments` are freed (after its upload).
    ///
    /// # Errors
    /// The pool's free errors for the redundant `segments`.
    pub(crate) fn store_weight(
        &self,
        key: &WeightKey,
        segments: Segments,
        padded: u64,
    ) -> Result<Segments> {
        let mut entries = self.weights().lock();
        if let Some(e) = entries.get_mut(key) {
            e.refs += 1;
            let shared = e.segments.clone();
            drop(entries);
            let pool = self.device_pool();
            for a in segments.allocs() {
                pool.free(a.handle)?;
            }
            return Ok(shared);
        }
        entries.insert(
            key.clone(),
            Entry {
                segments: segments.clone(),
                padded,
                refs: 1,
            },
        );
        Ok(segments)
    }

    /// Frees the allocations of a weight whose upload failed, after any part of it that was
    /// queued.
    pub(crate) fn discard_weight(&self, segments: &Segments) {
        let after = self.backend().flush().unwrap_or(Ticket::DONE);
        self.discard_segments(segments, after);
    }

    /// Drops one reference to `key`; the last one frees the weight's allocation (after the work
    /// recorded on it).
    ///
    /// # Errors
    /// [`Error::InvariantViolated`] when the store holds no reference to `key`; the pool's free
    /// errors.
    pub(crate) fn release_weight(&self, key: &WeightKey) -> Result<()> {
        let mut entries = self.weights().lock();
        let e = entries.get_mut(key).ok_or_else(|| {
            Error::invariant(
                "every weight release matches a reference",
                format!("no reference to '{}'", key.name),
            )
        })?;
        e.refs -= 1;
        if e.refs > 0 {
            return Ok(());
        }
        let segments = e.segments.clone();
        entries.remove(key);
        drop(entries);
        let pool = self.device_pool();
        let mut result = Ok(());
        for a in segments.allocs() {
            result = result.and(pool.free(a.handle));
        }
        result
    }
}

#[cfg(test)]
mod tests;
