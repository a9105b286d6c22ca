//! Host-to-device writes of a model's tensors: inputs set for the next run, and weights bound
//! through the runtime's shared store (deduplicated by content hash, streamed in chunks). Separate
//! because binding a weight is its own protocol (share, upload, roll back on failure).

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{Ticket, Waiting};
use crate::graph::{TensorId, TensorKind};
use crate::runtime::Runtime;
use crate::runtime::segments::Segments;
use crate::runtime::weights::{WeightHasher, WeightKey};
use crate::{Error, Result};

use super::finite::FiniteScan;
use super::{Model, Place};

/// Bytes per upload call when a weight streams in ([`Model::set_weight_chunks`] cuts a whole
/// slice into pieces of this size): the staging belt moves a piece at a time, so a caller whose
/// source is a memory-mapped file can release each piece's pages as it goes.
pub const WEIGHT_CHUNK_BYTES: usize = 4 << 20;

impl Model {
    async fn set(
        &mut self,
        waiting: Waiting,
        t: TensorId,
        kind: TensorKind,
        data: &[u8],
    ) -> Result<Ticket> {
        let decl = self.graph.decl(t)?;
        let size = decl.check_data(kind, data.len() as u64)?;
        let root = self.graph.decl(self.graph.root(t))?;
        if decl.offset != 0 || size != root.size()? {
            return Err(crate::GraphError::PartialView {
                tensor: decl.name.clone(),
                root: root.name.clone(),
            }
            .into());
        }
        if let Some(o) = &mut self.offload {
            return o
                .write(waiting, &self.rt, self.graph.root(t).index(), data)
                .await;
        }
        let p = self.place(t)?;
        if let Some(segs) = self.segments_of(&p) {
            return self.rt.write_segments(waiting, segs, size, 0, data).await;
        }
        self.rt
            .write_bytes_with(waiting, p.alloc, p.offset, data)
            .await
    }

    /// Binds weight `t` to `data` through the runtime's store: when a model of this runtime
    /// already bound equal bytes under the same name, `t` shares them and nothing is uploaded;
    /// otherwise they are uploaded once. Weights persist across runs. Setting a bound weight again
    /// rebinds it (the old bytes are released, never overwritten under another model). Native
    /// only; see [`Model::set_weight_async`].
    ///
    /// # Errors
    /// [`GraphError::WrongKind`](crate::GraphError) when `t` is not a weight,
    /// [`Error::SizeMismatch`], [`Error::NonFiniteWeight`] when an f32, f16 or f64 weight holds a
    /// NaN or an infinity, transfer and allocation errors (the weight keeps its previous binding).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_weight(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        let mut h = WeightHasher::new();
        h.update(data);
        self.set_weight_hashed(t, h.finish(), data)
    }

    /// [`Model::set_weight`] without blocking.
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    pub async fn set_weight_async(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        let mut h = WeightHasher::new();
        h.update(data);
        let (hash, size) = (h.finish(), data.len() as u64);
        self.set_weight_with(
            Waiting::Async,
            t,
            hash,
            size,
            data.chunks(WEIGHT_CHUNK_BYTES),
        )
        .await
    }

    /// [`Model::set_weight`] with the bytes' [`content_hash`](crate::runtime::content_hash)
    /// computed by the caller (a loader that hashed the file once binds a second model's weights
    /// without reading them again). A wrong hash does not corrupt other weights, but two different
    /// byte strings given one hash under one name would share the first one's bytes.
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_weight_hashed(&mut self, t: TensorId, hash: u64, data: &[u8]) -> Result<Ticket> {
        self.set_weight_chunks(t, hash, data.len() as u64, data.chunks(WEIGHT_CHUNK_BYTES))
    }

    /// [`Model::set_weight_hashed`] from a source that yields the `size` bytes in order, in
    /// chunks whose lengths are multiples of the backend's copy alignment (all but the last; 4
    /// bytes on every backend). Each chunk is uploaded
    /// before the next is asked for, so the source (a memory-mapped file) can drop the pages it
    /// already handed out: a weight streams to the device without a host copy of the whole.
    /// Nothing is read when the store already holds the weight.
    ///
    /// # Errors
    /// As [`Model::set_weight`]; [`Error::SizeMismatch`] when the chunks do not add up to `size`
    /// or `size` is not the tensor's byte size; [`Error::Misaligned`] for a chunk boundary that is
    /// not a multiple of the copy alignment.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_weight_chunks<'a>(
        &mut self,
        t: TensorId,
        hash: u64,
        size: u64,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Ticket> {
        complete_now(self.set_weight_with(Waiting::Blocking, t, hash, size, chunks))
    }

    /// The one weight binding path, waiting in `waiting`'s mode.
    async fn set_weight_with<'a>(
        &mut self,
        waiting: Waiting,
        t: TensorId,
        hash: u64,
        size: u64,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Ticket> {
        let decl = self.graph.decl(t)?;
        decl.check_data(TensorKind::Weight, size)?;
        if self.offload.is_some() {
            // A budgeted model keeps its weights in its own arena or host masters (the schedule
            // streams them), not in the runtime's shared store.
            let mut scan = FiniteScan::new(&decl.name, decl.dtype);
            let mut data = Vec::with_capacity(size as usize);
            for chunk in chunks {
                scan.feed(chunk)?;
                data.extend_from_slice(chunk);
            }
            return self.set(waiting, t, TensorKind::Weight, &data).await;
        }
        let root = self.graph.root(t).index();
        let key = WeightKey {
            name: decl.name.clone(),
            dtype: decl.dtype,
            size,
            hash,
        };
        if self.weight_keys[root].as_ref() == Some(&key) {
            return Ok(Ticket::DONE);
        }
        let copy_align = self.rt.backend().capabilities().copy_align.max(1);
        let padded =
            size.checked_next_multiple_of(copy_align)
                .ok_or_else(|| Error::ArithmeticOverflow {
                    what: format!("padded byte size of '{}'", key.name),
                    limit_name: "u64",
                })?;
        let rt = self.rt.clone();
        let mut last = Ticket::DONE;
        let segs = match rt.share_weight(&key) {
            Some(segs) => segs,
            None => {
                let segs =
                    rt.alloc_segments(decl.dtype, &decl.shape, size, self.align, &key.name)?;
                let scan = FiniteScan::new(&key.name, decl.dtype);
                let uploaded =
                    upload_chunks(&rt, waiting, &segs, scan, size, copy_align, chunks).await;
                match uploaded {
                    Ok(t) => last = t,
                    Err(e) => {
                        rt.discard_weight(&segs);
                        return Err(e);
                    }
                }
                rt.store_weight(&key, segs, padded)?
            }
        };
        if let Some(old) = self.weight_keys[root].replace(key) {
            self.rt.release_weight(&old)?;
        }
        let segmented = (segs.allocs().len() > 1).then(|| {
            self.segmented.push(segs.clone());
            self.segmented.len() - 1
        });
        self.places[root] = Some(Place {
            alloc: segs.first(),
            offset: 0,
            size: padded,
            planned: false,
            segmented,
        });
        Ok(last)
    }

    /// Uploads an input for the next run. Native only; see [`Model::set_input_async`].
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_input(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        complete_now(self.set(Waiting::Blocking, t, TensorKind::Input, data))
    }

    /// [`Model::set_input`] without blocking.
    ///
    /// # Errors
    /// As [`Model::set_weight`].
    pub async fn set_input_async(&mut self, t: TensorId, data: &[u8]) -> Result<Ticket> {
        self.set(Waiting::Async, t, TensorKind::Input, data).await
    }
}

/// Writes the `size` bytes `chunks` yield into `segs` in order (each boundary a multiple of
/// `copy_align`), each chunk checked by `scan` before it is written. Returns the latest ticket of
/// the writes.
async fn upload_chunks<'a>(
    rt: &Runtime,
    waiting: Waiting,
    segs: &Segments,
    mut scan: FiniteScan<'_>,
    size: u64,
    copy_align: u64,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Ticket> {
    let mut last = Ticket::DONE;
    let mut offset = 0u64;
    for chunk in chunks {
        if !offset.is_multiple_of(copy_align) {
            return Err(Error::Misaligned {
                what: "weight chunk offset",
                value: offset,
                align: copy_align,
                align_name: "copy_align",
            });
        }
        if offset + chunk.len() as u64 > size {
            return Err(Error::SizeMismatch {
                what: format!("streamed bytes of weight '{}'", scan.tensor()),
                expected: size,
                actual: offset + chunk.len() as u64,
            });
        }
        scan.feed(chunk)?;
        if !chunk.is_empty() {
            last = last.max(
                rt.write_segments(waiting, segs, size, offset, chunk)
                    .await?,
            );
        }
        offset += chunk.len() as u64;
    }
    if offset != size {
        return Err(Error::SizeMismatch {
            what: format!("streamed bytes of weight '{}'", scan.tensor()),
            expected: size,
            actual: offset,
        });
    }
    Ok(last)
}
