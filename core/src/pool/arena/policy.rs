//! The block policy of the fallback path (a backend that cannot grow a block in place, or an
//! arena whose reservation is full): which blocks a request may use, and how big a new block is.
//! Pure arithmetic, kept apart from the bookkeeping in [`growth`](super::growth) so that it can
//! be read, tested and tuned on its own.
//!
//! * **Two classes.** Requests up to [`SMALL_REQUEST_MAX`] (1 MiB, PyTorch's small pool) live in
//!   small blocks, larger ones in large blocks. A small tensor never pins a large block, so large
//!   blocks empty out between steps and go back when they no longer fit the stream.
//! * **Sizes that follow the stream.** A new block is the request, raised to a growth step of
//!   [`GROWTH_STEP_DIVISOR`]⁻¹ of what the class already holds: blocks grow geometrically with
//!   the workload, so the number of driver calls is logarithmic in the peak while the unused room
//!   stays a small fraction of it (the arena that grows in place uses the same fraction). A small
//!   class starts at [`SMALL_BLOCK_MIN`] (PyTorch's 2 MiB small segment) and its blocks stop at
//!   [`ArenaConfig::block_size`](super::ArenaConfig::block_size); large blocks have no cap: they
//!   are split and shared by later requests, never dedicated to one. Sizes are rounded to
//!   [`BLOCK_GRANULE`].
//!
//! Measured on the issue 14 traces (`cargo bench -p tensormem --bench pool_traces`), against the
//! alternatives tried: folding the class's empty blocks into the new block (their bytes added to
//! it) made the first pass of a model overshoot (Llama prefill 1.55× live instead of 1.23×);
//! releasing the other class's empty blocks too made small and large blocks take turns (thousands
//! of reservations); letting a class borrow room in the other's blocks traded 3–5 % on the large
//! traces for 5 % on MobileNet, and pins blocks; a 16ᵗʰ step cost 2 % on GPT-2 for fewer driver
//! calls; a small class starting at 0.5 or 1 MiB made more small blocks and a worse MobileNet.

use super::round_up;

/// Requests of at most this many bytes are small (served by small blocks): 1 MiB.
pub const SMALL_REQUEST_MAX: u64 = 1 << 20;
/// Smallest block of the small class: 2 MiB (clamped to the configured block size).
pub const SMALL_BLOCK_MIN: u64 = 2 << 20;
/// A new block holds at least its class's reserved bytes divided by this.
pub const GROWTH_STEP_DIVISOR: u64 = 32;
/// Block sizes are multiples of this (64 KiB, a common device allocation granularity), or of the
/// configured block size when that is smaller.
pub const BLOCK_GRANULE: u64 = 64 << 10;

/// The block class a request of `size` bytes is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Requests up to [`SMALL_REQUEST_MAX`].
    Small,
    /// Larger requests.
    Large,
}

impl Class {
    pub(crate) fn of(size: u64) -> Class {
        if size <= SMALL_REQUEST_MAX {
            Class::Small
        } else {
            Class::Large
        }
    }
}

/// What a new block is sized from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockRequest {
    /// The request's class.
    pub class: Class,
    /// Bytes the request needs (already rounded to the copy alignment).
    pub need: u64,
    /// Bytes the class's remaining blocks hold.
    pub class_reserved: u64,
    /// [`ArenaConfig::block_size`](super::ArenaConfig::block_size): the small class's cap.
    pub block_size: u64,
    /// Bytes the budget still allows.
    pub room: u64,
    /// The device's largest block (`Capabilities::max_block_size`, which need not be a power of
    /// two, nor a multiple of the granule): no block is larger.
    pub max_block: u64,
    /// The copy alignment (a power of two): every block size is a multiple of it.
    pub align: u64,
}

impl BlockRequest {
    /// Size of the new block: the request raised to the class's growth step, rounded to the
    /// granule; shrunk to the request alone when the budget has no room for more. `None` when not
    /// even the request fits in the room.
    pub(crate) fn block_bytes(&self) -> Option<u64> {
        let granule = granule(self.block_size, self.align);
        let step = self.class_reserved / GROWTH_STEP_DIVISOR;
        let step = match self.class {
            Class::Small => step.max(SMALL_BLOCK_MIN).min(self.block_size),
            Class::Large => step,
        };
        let largest = self.max_block / self.align * self.align;
        let want = round_up(self.need.max(step), granule)
            .map(|w| w.min(largest))
            .filter(|w| *w >= self.need && *w <= self.room);
        want.or_else(|| round_up(self.need, self.align).filter(|n| *n <= self.room))
    }
}

/// The rounding of block sizes: [`BLOCK_GRANULE`], or the largest power of two not above
/// `block_size` when that is smaller, and never below `align`.
fn granule(block_size: u64, align: u64) -> u64 {
    let floor = 1u64 << (63 - block_size.max(1).leading_zeros());
    BLOCK_GRANULE.min(floor).max(align)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(class: Class, need: u64) -> BlockRequest {
        BlockRequest {
            class,
            need,
            class_reserved: 0,
            block_size: 32 << 20,
            room: u64::MAX,
            max_block: u64::MAX,
            align: 4,
        }
    }

    /// Regression (issue 13): a block limit that is no power of two (12 000 bytes under lowered
    /// test limits; CUDA's is the device's total memory) made the granule rounding ask for a
    /// 16 KiB block the device refuses.
    #[test]
    fn blocks_never_exceed_the_device_limit() {
        for class in [Class::Small, Class::Large] {
            let r = BlockRequest {
                block_size: 12_000,
                max_block: 12_000,
                class_reserved: 1 << 40,
                ..request(class, 12_000)
            };
            assert_eq!(r.block_bytes(), Some(12_000));
        }
    }

    #[test]
    fn small_blocks_start_at_the_minimum_and_stop_at_the_block_size() {
        let r = request(Class::Small, 1000);
        assert_eq!(r.block_bytes(), Some(SMALL_BLOCK_MIN));
        let grown = BlockRequest {
            class_reserved: 1 << 30,
            ..r
        };
        assert_eq!(grown.block_bytes(), Some(32 << 20));
        let capped = BlockRequest {
            block_size: 1 << 16,
            ..r
        };
        assert_eq!(capped.block_bytes(), Some(1 << 16));
    }

    #[test]
    fn large_blocks_are_the_request_or_the_step() {
        let r = request(Class::Large, (3 << 20) + 5);
        assert_eq!(r.block_bytes(), Some((3 << 20) + BLOCK_GRANULE));
        let stepped = BlockRequest {
            class_reserved: 1 << 30,
            ..r
        };
        assert_eq!(stepped.block_bytes(), Some((1 << 30) / GROWTH_STEP_DIVISOR));
    }

    #[test]
    fn the_room_shrinks_the_block_to_the_request_then_refuses() {
        let r = BlockRequest {
            room: 3000,
            ..request(Class::Small, 1001)
        };
        assert_eq!(r.block_bytes(), Some(1004));
        let none = BlockRequest { room: 1000, ..r };
        assert_eq!(none.block_bytes(), None);
        let overflow = request(Class::Large, u64::MAX);
        assert_eq!(overflow.block_bytes(), None, "rounding overflows");
    }

    #[test]
    fn requests_split_at_one_mebibyte() {
        assert_eq!(Class::of(SMALL_REQUEST_MAX), Class::Small);
        assert_eq!(Class::of(SMALL_REQUEST_MAX + 1), Class::Large);
    }
}
