//! The file's bytes, read into memory or mapped, and the release of a mapped range's pages.

#[cfg(not(target_arch = "wasm32"))]
use memmap2::Mmap;

/// The file's bytes: read into memory, or mapped (native only: a browser fetches them).
#[derive(Debug)]
pub(super) enum Storage {
    Owned(Vec<u8>),
    #[cfg(not(target_arch = "wasm32"))]
    Mapped(Mmap),
}

impl Storage {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Storage::Owned(v) => v,
            #[cfg(not(target_arch = "wasm32"))]
            Storage::Mapped(m) => m,
        }
    }

    /// Drops the resident pages of `range` from the process when mapped (a no-op when owned).
    /// Only whole pages inside the range are released; failure is harmless (the pages stay).
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn release(&self, start: usize, end: usize) {
        let Storage::Mapped(m) = self else { return };
        const PAGE: usize = 4096;
        let (first, last) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
        if last > first {
            // SAFETY: `m` is a read-only shared mapping of a file (`Mmap::map`); MADV_DONTNEED
            // only drops its resident pages, and the next access faults them back in from the
            // file with the same contents, so no byte a live borrow sees ever changes. The
            // range is inside the map (`start..end` is a tensor's range of it).
            let _ = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
            };
        }
    }

    /// Nothing is mapped in a browser (the page fetches the file).
    #[cfg(target_arch = "wasm32")]
    pub(super) fn release(&self, _start: usize, _end: usize) {}
}
