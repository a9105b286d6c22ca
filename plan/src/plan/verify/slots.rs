//! The check of buffers placed in slots (the rest of a cut sweep, see [`crate::plan::sweep`]):
//! O(1) per endpoint against a certificate, each buffer's slot, where the general [`super::Checker`]
//! keeps an ordered set of the live buffers (at a million buffers, most of the cost of a cut
//! first plan was that set's moves).
//!
//! Why passing it proves the placement: within a time-connected group (a maximal run during which
//! something is live, counted from the events, not taken from the planner), a slot is opened only
//! at or above the end of every slot opened before it, so the group's slots are disjoint byte
//! ranges; each buffer lies within its slot; a slot holds one live buffer at a time. Two buffers
//! live together are then in different slots, so in disjoint bytes. Groups never overlap in time.
//! Buffers placed before the check started and still live (the sweep's, at the cut) must end at
//! or below the first group's base, which the caller checks with their verifier's live set.

use super::Fault;

/// A slot's occupant when it holds no live buffer.
const FREE: u32 = u32::MAX;

/// One slot: bytes `[start, start + len)`, and the live buffer in it with that buffer's end.
#[derive(Debug, Clone, Copy)]
struct Slot {
    start: u64,
    len: u64,
    occupant: u32,
    end: u64,
}

/// The checker, fed the endpoints after a cut in time order.
#[derive(Debug)]
pub(crate) struct SlotCheck {
    /// The current group's slots, by the certificate's slot number.
    slots: Vec<Slot>,
    /// The end of the current group's highest slot: a new slot starts at or above it.
    top: u64,
    /// Buffers live (those placed before the cut included).
    live: usize,
    peak: u64,
}

impl SlotCheck {
    /// Starts after a cut at which `live` buffers (placed before it) are live, all ending at or
    /// below `base`, where the first group's slots start.
    pub fn new(base: u64, live: usize) -> Self {
        SlotCheck {
            slots: Vec::new(),
            top: base,
            live,
            peak: 0,
        }
    }

    /// Buffer `id` of `size` bytes and alignment `align` opens at `offset`, in slot number `slot`:
    /// a new slot of `len` bytes when `slot` is the next number of its group, else an open one.
    pub fn alloc(
        &mut self,
        (id, size, align): (u32, u64, u64),
        offset: u64,
        slot: u32,
        len: u64,
    ) -> Result<(), Fault> {
        if self.live == 0 {
            self.slots.clear();
            self.top = 0;
        }
        self.live += 1;
        let buffer = id as usize;
        if !offset.is_multiple_of(align) {
            return Err(Fault::Misaligned(buffer, offset));
        }
        let end = offset.checked_add(size).ok_or(Fault::OutOfBounds {
            offset,
            size,
            limit: None,
        })?;
        let bad = |why| {
            Err(Fault::Certificate {
                buffer: Some(buffer),
                why,
            })
        };
        let s = slot as usize;
        if s == self.slots.len() {
            if offset < self.top {
                return bad("a new slot starts below an earlier slot's end");
            }
            let Some(top) = offset.checked_add(len) else {
                return bad("a slot ends past the address space");
            };
            self.top = top;
            self.slots.push(Slot {
                start: offset,
                len,
                occupant: FREE,
                end: 0,
            });
        }
        let Some(slot) = self.slots.get_mut(s) else {
            return bad("its slot number was never opened in its group");
        };
        if slot.start != offset || size > slot.len {
            return bad("it does not lie within its slot");
        }
        if slot.occupant != FREE {
            return Err(Fault::Clash {
                a: (slot.occupant as usize, slot.start, slot.end),
                b: (buffer, offset, end),
            });
        }
        (slot.occupant, slot.end) = (id, end);
        self.peak = self.peak.max(end);
        Ok(())
    }

    /// Buffer `id` dies; `slot`: the slot it was opened in by [`Self::alloc`], `None` for a buffer
    /// placed before the cut.
    pub fn free(&mut self, id: u32, slot: Option<u32>) -> Result<(), Fault> {
        let bad = |why| {
            Err(Fault::Certificate {
                buffer: Some(id as usize),
                why,
            })
        };
        // A live count given too low at the cut would reset a group early: it shows here.
        let Some(live) = self.live.checked_sub(1) else {
            return bad("more buffers die than were live");
        };
        self.live = live;
        let Some(s) = slot else { return Ok(()) };
        match self.slots.get_mut(s as usize) {
            Some(slot) if slot.occupant == id => {
                slot.occupant = FREE;
                Ok(())
            }
            _ => bad("it leaves a slot it is not in"),
        }
    }

    /// After the last endpoint: nothing is live (a live count given too high at the cut would have
    /// kept a group from ending).
    pub fn finish(&self) -> Result<(), Fault> {
        if self.live == 0 {
            Ok(())
        } else {
            Err(Fault::Certificate {
                buffer: None,
                why: "buffers are still live after the last endpoint",
            })
        }
    }

    /// The largest end of a buffer opened here.
    pub fn peak(&self) -> u64 {
        self.peak
    }
}

#[cfg(test)]
mod tests;
