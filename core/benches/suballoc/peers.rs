//! The allocators the benchmark runs, behind the harness's one small interface: ours (TLSF and
//! buddy), the two peer crates in their own units, and a no-op baseline.

use std::hint::black_box;

use tensormem::suballoc::{Buddy, Region, SubAllocator, Tlsf};

use super::{CAPACITY, UNIT};

/// The operations the harness needs from an allocator.
pub trait Sub {
    type Handle;
    fn create() -> Self;
    fn alloc(&mut self, size: u64) -> Option<Self::Handle>;
    fn free(&mut self, handle: Self::Handle);
}

/// tensormem's sub-allocators, through the trait they share.
pub struct Ours<A>(A);

/// tensormem's TLSF.
pub type OursTlsf = Ours<Tlsf>;

/// tensormem's buddy allocator, blocks of 256 B and up.
pub type OursBuddy = Ours<Buddy>;

/// How each of ours is made over the benchmark's range.
pub trait OverRange {
    fn over_range() -> Self;
}

impl OverRange for Tlsf {
    fn over_range() -> Self {
        Tlsf::new(CAPACITY).unwrap()
    }
}

impl OverRange for Buddy {
    fn over_range() -> Self {
        Buddy::with_min_block(CAPACITY, UNIT).unwrap()
    }
}

impl<A: SubAllocator + OverRange> Sub for Ours<A> {
    type Handle = Region;
    fn create() -> Self {
        Ours(A::over_range())
    }
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<Self::Handle> {
        self.0.allocate(size, UNIT).unwrap()
    }
    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.0.free(handle).unwrap();
    }
}

/// `offset-allocator` (sebbbi's OffsetAllocator), in 256-byte units.
pub struct Offset(offset_allocator::Allocator);

impl Sub for Offset {
    type Handle = offset_allocator::Allocation;
    fn create() -> Self {
        Offset(offset_allocator::Allocator::new((CAPACITY / UNIT) as u32))
    }
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<Self::Handle> {
        self.0.allocate((size / UNIT) as u32)
    }
    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.0.free(handle);
    }
}

/// `xalloc`'s TLSF with system-allocated block metadata.
pub struct Xalloc(xalloc::SysTlsf<u64>);

impl Sub for Xalloc {
    type Handle = xalloc::SysTlsfRegion;
    fn create() -> Self {
        Xalloc(xalloc::SysTlsf::with_capacity(CAPACITY, 4096))
    }
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<Self::Handle> {
        self.0.alloc(size).map(|(region, _offset)| region)
    }
    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.0.dealloc(handle).unwrap();
    }
}

/// Does nothing: the harness overhead (trace walk, live-slot bookkeeping) alone.
pub struct Noop;

impl Sub for Noop {
    type Handle = u64;
    fn create() -> Self {
        Noop
    }
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<u64> {
        Some(black_box(size))
    }
    #[inline]
    fn free(&mut self, handle: u64) {
        black_box(handle);
    }
}
