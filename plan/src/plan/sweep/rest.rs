//! The rest of a cut sweep: placed in size-class slabs (or a stack) and checked in its slots as it
//! is placed ([`SlotCheck`]), on the sweep's thread or, where the caller has a second core, on a
//! thread beside it.
//!
//! At a million buffers and a zero limit the rest is the whole first plan, and the placing is
//! only about half of its cost: the check and the writes of each offset at its buffer's id (a
//! random place in an 8 MB array) are the other half. On a second thread they run beside the
//! placing instead of after each step of it, in chunks handed over without waiting.

use std::sync::mpsc;

use crate::plan::align_up;
use crate::plan::events::{Event, Events};
use crate::plan::verify::{Fault, GATHER, SlotCheck};

/// A free's slot number when the buffer was placed before the cut (not in a slot).
const NO_SLOT: u32 = u32::MAX;

/// The allocator for the buffers after a cut: size-class slabs over `[base, …)`, or a stack when
/// slabs could overflow. Reset (to 0) when nothing at all is live: a new time-connected group.
///
/// A slot of class `k` is `2^k` bytes at a multiple of `2^k`, for a buffer whose size and
/// alignment are at most `2^k`: any slot of a class fits any buffer of that class. A new slot
/// starts at most `2^k - 1` above the top and `2^k` is at most twice the buffer's padded size
/// `size + align - 1`, so the top grows by at most four padded sizes per buffer; with the base
/// (the arena's top, itself within the padded total of the group's buffers placed before) the
/// slabs stay within five times the group's padded total.
pub(super) struct Rest {
    slabs: bool,
    top: u64,
    /// The group's slots' offsets, by number.
    slots: Vec<u64>,
    /// Free slots per class (`free[k]`: numbers of free `2^k`-byte slots).
    free: Vec<Vec<u32>>,
}

impl Rest {
    pub fn new(slabs: bool, base: u64) -> Self {
        Rest {
            slabs,
            top: base,
            slots: Vec::new(),
            free: vec![Vec::new(); 64],
        }
    }

    fn reset(&mut self) {
        self.top = 0;
        self.slots.clear();
        self.free.iter_mut().for_each(Vec::clear);
    }

    /// The class of a buffer: `k` with `2^k >= max(size, align)`.
    fn class(size: u64, align: u64) -> usize {
        size.max(align).next_power_of_two().trailing_zeros() as usize
    }

    /// An offset for the buffer, its slot's number for [`Self::free`] and the slot's length.
    fn alloc(&mut self, size: u64, align: u64) -> (u64, u32, u64) {
        let (k, len) = if self.slabs {
            let k = Self::class(size, align);
            if let Some(slot) = self.free[k].pop() {
                return (self.slots[slot as usize], slot, 1 << k);
            }
            (k, 1 << k)
        } else {
            (0, size)
        };
        let offset = align_up(self.top, align.max(1 << k));
        self.top = offset + len;
        self.slots.push(offset);
        (offset, (self.slots.len() - 1) as u32, len)
    }

    /// Takes back slot number `slot` of `len` bytes (as [`Self::alloc`] returned them).
    fn free(&mut self, slot: u32, len: u64) {
        if self.slabs {
            self.free[len.trailing_zeros() as usize].push(slot);
        }
    }
}

/// The state of the sweep at its cut, which the rest goes on from.
pub(super) struct AtCut<'a> {
    /// By allocation rank: the offset and the arena's handle before the cut; after it, the
    /// slot's length and number (the length is what [`Rest::free`] needs, where looking it up by
    /// slot number was a second cache miss at each free).
    pub slots: &'a mut Vec<(u64, u32)>,
    /// Allocations of this rank and above are the rest's.
    pub cut: usize,
    pub live: usize,
    pub peak: u64,
}

/// One endpoint of the rest as placed: at an allocation, its offset and its slot's number and
/// length; at a free, its slot's number ([`NO_SLOT`] for a buffer placed before the cut).
#[derive(Debug, Clone, Copy)]
struct Slotted {
    offset: u64,
    len: u64,
    slot: u32,
}

/// Places the endpoints from position `from` on (the rest) with `rest` and checks them with
/// `check`, writing each buffer's offset into `offsets` by id; with `beside`, the check and the
/// writes run on a second thread. Returns the plan's peak and the finished check.
///
/// # Errors
/// The [`Fault`] the check found: a bug in the slabs, never hidden.
pub(super) fn place_rest(
    events: &Events,
    from: usize,
    mut rest: Rest,
    at: AtCut<'_>,
    offsets: &mut [u64],
    mut check: SlotCheck,
    beside: bool,
) -> Result<(u64, SlotCheck), Fault> {
    let placing = events.range(from..events.len());
    let mut checking = events.range(from..events.len());
    if !beside {
        let mut checked = Ok(());
        let peak = place(placing, &mut rest, at, &mut |chunk| {
            if checked.is_ok() {
                checked = check_chunk(&mut check, offsets, &mut checking, chunk);
            }
        });
        checked?;
        check.finish()?;
        return Ok((peak, check));
    }
    std::thread::scope(|s| {
        let (to_check, inbox) = mpsc::channel::<Vec<Slotted>>();
        let (give_back, spare) = mpsc::channel::<Vec<Slotted>>();
        let checker = s.spawn(move || {
            for chunk in inbox {
                check_chunk(&mut check, offsets, &mut checking, &chunk)?;
                // The placing may be done and gone: then the buffer is simply dropped.
                let _ = give_back.send(chunk);
            }
            check.finish()?;
            Ok(check)
        });
        let peak = place(placing, &mut rest, at, &mut |chunk| {
            let next = spare
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(GATHER));
            // A checker that stopped has found a fault, which its join returns.
            let _ = to_check.send(std::mem::replace(chunk, next));
        });
        drop(to_check);
        let check = checker
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))?;
        Ok((peak, check))
    })
}

/// Places `endpoints` with `rest`, going on from the sweep's state `at`, and hands each chunk of
/// [`GATHER`] placements (fewer at the end) to `hand`, which may keep the vector it is handed.
/// Returns the plan's peak.
fn place(
    endpoints: impl Iterator<Item = Event>,
    rest: &mut Rest,
    at: AtCut<'_>,
    hand: &mut dyn FnMut(&mut Vec<Slotted>),
) -> u64 {
    let AtCut {
        slots,
        cut,
        mut live,
        mut peak,
    } = at;
    let mut chunk = Vec::with_capacity(GATHER);
    for e in endpoints {
        if e.alloc {
            if live == 0 {
                rest.reset();
            }
            live += 1;
            let (offset, slot, len) = rest.alloc(e.size, e.align);
            slots.push((len, slot));
            peak = peak.max(offset + e.size);
            chunk.push(Slotted { offset, len, slot });
        } else {
            live -= 1;
            // Buffers the sweep placed die where it put them; the slabs take back their own.
            let (len, slot) = slots[e.opened as usize];
            let slot = if e.opened as usize >= cut {
                rest.free(slot, len);
                slot
            } else {
                NO_SLOT
            };
            chunk.push(Slotted {
                offset: 0,
                len: 0,
                slot,
            });
        }
        if chunk.len() == GATHER {
            hand(&mut chunk);
            chunk.clear();
        }
    }
    if !chunk.is_empty() {
        hand(&mut chunk);
    }
    peak
}

/// Checks one chunk of placements against the next endpoints of `events`, and writes the
/// offsets of its allocations.
fn check_chunk(
    check: &mut SlotCheck,
    offsets: &mut [u64],
    events: &mut impl Iterator<Item = Event>,
    chunk: &[Slotted],
) -> Result<(), Fault> {
    // The chunk first: at its end, `zip` takes no event from the next chunk's.
    for (p, e) in chunk.iter().zip(events) {
        if e.alloc {
            check.alloc((e.id, e.size, e.align), p.offset, p.slot, p.len)?;
            offsets[e.id as usize] = p.offset;
        } else {
            check.free(e.id, (p.slot != NO_SLOT).then_some(p.slot))?;
        }
    }
    Ok(())
}
