//! The belt's transfers: uploads and readbacks split into chunks of at most one block, each
//! written once as an `async fn` over [`Waiting`] with blocking forms on native targets.

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{BlockRange, HostAccess, MemoryKind, Ticket, Waiting};
use crate::{Error, Result};

use super::StagingBelt;

impl StagingBelt {
    /// Copies `data` into `dst` (a device range at least `data.len()` bytes, rounded up to the copy
    /// alignment) through the belt. Returns the ticket of the last chunk's copy. Native only; see
    /// [`StagingBelt::upload_async`].
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::OutOfBounds`] when `dst` is too small, backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn upload(&self, dst: BlockRange, data: &[u8]) -> Result<Ticket> {
        complete_now(self.upload_with(Waiting::Blocking, dst, data))
    }

    /// [`StagingBelt::upload`] without blocking: a full belt and the mapping of its blocks are
    /// awaited.
    ///
    /// # Errors
    /// As [`StagingBelt::upload`].
    pub async fn upload_async(&self, dst: BlockRange, data: &[u8]) -> Result<Ticket> {
        self.upload_with(Waiting::Async, dst, data).await
    }

    /// The one upload path. The belt's lock is never held across an await: a region taken from a
    /// ring stays allocated (not retired) while the chunk is written, so nothing else reuses it.
    pub(crate) async fn upload_with(
        &self,
        waiting: Waiting,
        dst: BlockRange,
        data: &[u8],
    ) -> Result<Ticket> {
        self.check_fits(data.len(), dst, "upload", "upload destination")?;
        let chunk = self.config.block_size as usize;
        let mut ticket = Ticket::DONE;
        let mut scratch = Vec::new();
        for (i, part) in data.chunks(chunk).enumerate() {
            let size = pad(part.len(), self.align);
            let bytes: &[u8] = if size as usize == part.len() {
                part
            } else {
                scratch.clear();
                scratch.extend_from_slice(part);
                scratch.resize(size as usize, 0);
                &scratch
            };
            let (id, region) = self.region(waiting, MemoryKind::Upload, size).await?;
            let backend = self.backend.as_ref();
            let mapped = waiting.host_access(backend, id, HostAccess::Write).await;
            let copied = mapped
                .and_then(|()| backend.write_mapped(id, region.offset, bytes))
                .and_then(|()| {
                    backend.copy(
                        BlockRange {
                            block: id,
                            offset: region.offset,
                            size,
                        },
                        BlockRange {
                            block: dst.block,
                            offset: dst.offset + (i * chunk) as u64,
                            size,
                        },
                    )
                });
            // Retire the region whatever happened: on error with the last good ticket, so the ring
            // never keeps a region that nothing will release.
            let t = *copied.as_ref().unwrap_or(&ticket);
            let mut st = self.lock();
            Self::retire(&mut st, MemoryKind::Upload, id, region, t)?;
            ticket = copied?;
            st.stats.uploaded += part.len() as u64;
            st.stats.chunks += 1;
        }
        let mut st = self.lock();
        self.trim_idle(&mut st)?;
        Ok(ticket)
    }

    /// Copies `out.len()` bytes from `src` (a device range) into `out` through the belt. Blocks
    /// until the data has arrived. Work enqueued earlier is ordered before the copy. Native only;
    /// see [`StagingBelt::download_async`].
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::OutOfBounds`] when `src` is too small, backend errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download(&self, src: BlockRange, out: &mut [u8]) -> Result<()> {
        complete_now(self.download_with(Waiting::Blocking, src, out))
    }

    /// [`StagingBelt::download`] without blocking: each chunk's copy and the mapping of its
    /// readback block are awaited.
    ///
    /// # Errors
    /// As [`StagingBelt::download`].
    pub async fn download_async(&self, src: BlockRange, out: &mut [u8]) -> Result<()> {
        self.download_with(Waiting::Async, src, out).await
    }

    /// The one readback path; as [`StagingBelt::upload_with`], no lock is held across an await and
    /// a region is retired only after its bytes were read out.
    pub(crate) async fn download_with(
        &self,
        waiting: Waiting,
        src: BlockRange,
        out: &mut [u8],
    ) -> Result<()> {
        self.check_fits(out.len(), src, "download", "download source")?;
        let chunk = self.config.block_size as usize;
        let mut scratch = Vec::new();
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            let size = pad(part.len(), self.align);
            let (id, region) = self.region(waiting, MemoryKind::Readback, size).await?;
            let backend = self.backend.as_ref();
            let copied = backend.copy(
                BlockRange {
                    block: src.block,
                    offset: src.offset + (i * chunk) as u64,
                    size,
                },
                BlockRange {
                    block: id,
                    offset: region.offset,
                    size,
                },
            );
            let result = match copied {
                Ok(t) => {
                    let read = async {
                        waiting.ticket(backend, t).await?;
                        waiting.host_access(backend, id, HostAccess::Read).await?;
                        if size as usize == part.len() {
                            backend.read_mapped(id, region.offset, part)
                        } else {
                            scratch.resize(size as usize, 0);
                            backend.read_mapped(id, region.offset, &mut scratch)?;
                            part.copy_from_slice(&scratch[..part.len()]);
                            Ok(())
                        }
                    };
                    read.await.map(|()| t)
                }
                Err(e) => Err(e),
            };
            let t = *result.as_ref().unwrap_or(&Ticket::DONE);
            let mut st = self.lock();
            Self::retire(&mut st, MemoryKind::Readback, id, region, t)?;
            result?;
            st.stats.downloaded += part.len() as u64;
            st.stats.chunks += 1;
        }
        let mut st = self.lock();
        self.trim_idle(&mut st)?;
        Ok(())
    }

    /// `Ok` when `len` bytes, padded to the copy alignment, fit in `range`: the check every
    /// transfer makes first.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] naming `what` for 0 bytes, [`Error::OutOfBounds`] naming `range_what`
    /// when the padded length exceeds `range`.
    fn check_fits(
        &self,
        len: usize,
        range: BlockRange,
        what: &'static str,
        range_what: &'static str,
    ) -> Result<()> {
        if len == 0 {
            return Err(Error::ZeroSize { what });
        }
        let padded = pad(len, self.align);
        if padded > range.size {
            return Err(Error::OutOfBounds {
                what: range_what,
                offset: 0,
                size: padded,
                limit: range.size,
            });
        }
        Ok(())
    }
}

/// `len` bytes padded to the copy alignment (a power of two); past `u64::MAX` it is `u64::MAX`,
/// which no destination holds, so the size check refuses it.
fn pad(len: usize, align: u64) -> u64 {
    crate::align::align_up(len as u64, align).unwrap_or(u64::MAX)
}
