//! Generational slots: how a pool turns `Copy` handles into detected double frees and uses after
//! free instead of undefined behaviour.
//!
//! Every live allocation sits in a slot. A handle names the slot *and* the generation it was issued
//! under, plus the id of the pool that issued it. Freeing bumps the slot's generation, so an old
//! handle no longer matches: the pool answers [`Error::DoubleFree`] or [`Error::StaleHandle`]
//! rather than touching memory that may belong to someone else now.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::{Error, Result};

/// Names one allocation of one pool. Cheap to copy; checked on every use.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    pool: u32,
    slot: u32,
    generation: u32,
}

impl Handle {
    /// The slot index (for reports and traces).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The pool that issued the handle.
    pub(crate) fn pool(&self) -> u32 {
        self.pool
    }

    /// The generation the handle was issued under.
    pub fn generation(&self) -> u32 {
        self.generation
    }
}

static NEXT_POOL_ID: AtomicU32 = AtomicU32::new(1);

/// A new id for a pool, unique in the process, so handles of one pool are refused by another.
pub(crate) fn next_pool_id() -> u32 {
    NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed)
}

struct Slot<T> {
    /// Odd generations are live, even ones free: a freed slot keeps a generation no live handle has.
    generation: u32,
    value: Option<T>,
}

/// A slab of values addressed by [`Handle`]s.
pub(crate) struct Slots<T> {
    pool: u32,
    what: &'static str,
    slots: Vec<Slot<T>>,
    /// Free slot indices; invariant: exactly the slots whose `value` is `None`.
    free: Vec<u32>,
    live: usize,
}

impl<T> Slots<T> {
    pub(crate) fn new(pool: u32, what: &'static str) -> Self {
        Slots {
            pool,
            what,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }

    #[inline]
    pub(crate) fn insert(&mut self, value: T) -> Handle {
        self.live += 1;
        if let Some(slot) = self.free.pop() {
            let s = &mut self.slots[slot as usize];
            s.generation = s.generation.wrapping_add(1);
            s.value = Some(value);
            return Handle {
                pool: self.pool,
                slot,
                generation: s.generation,
            };
        }
        let slot = self.slots.len() as u32;
        self.slots.push(Slot {
            generation: 1,
            value: Some(value),
        });
        Handle {
            pool: self.pool,
            slot,
            generation: 1,
        }
    }

    fn check(&self, h: Handle) -> Result<usize> {
        if h.pool != self.pool || h.slot as usize >= self.slots.len() {
            return Err(Error::ForeignHandle {
                what: self.what,
                slot: h.slot,
                owner: "pool",
            });
        }
        let s = &self.slots[h.slot as usize];
        if s.generation == h.generation && s.value.is_some() {
            return Ok(h.slot as usize);
        }
        if h.generation > s.generation {
            return Err(Error::ForeignHandle {
                what: self.what,
                slot: h.slot,
                owner: "pool",
            });
        }
        Err(Error::StaleHandle {
            what: self.what,
            slot: h.slot,
            generation: h.generation,
            current: s.generation,
        })
    }

    /// A slot whose generation says live but holds no value: a bug in this table.
    #[cold]
    fn empty_live_slot() -> Error {
        Error::invariant(
            "a slot with a live generation holds a value",
            "slot checked live but empty",
        )
    }

    pub(crate) fn get(&self, h: Handle) -> Result<&T> {
        let i = self.check(h)?;
        self.slots[i]
            .value
            .as_ref()
            .ok_or_else(Self::empty_live_slot)
    }

    pub(crate) fn get_mut(&mut self, h: Handle) -> Result<&mut T> {
        let i = self.check(h)?;
        self.slots[i]
            .value
            .as_mut()
            .ok_or_else(Self::empty_live_slot)
    }

    /// The value, checked as [`Slots::remove`] would check it (same errors), without removing it:
    /// lets a pool validate a free before it changes anything.
    pub(crate) fn get_for_remove(&self, h: Handle) -> Result<&T> {
        if h.pool == self.pool && (h.slot as usize) < self.slots.len() {
            let s = &self.slots[h.slot as usize];
            if s.value.is_none() && s.generation == h.generation {
                return Err(Error::DoubleFree {
                    what: self.what,
                    slot: h.slot,
                    generation: h.generation,
                });
            }
        }
        self.get(h)
    }

    /// Removes the value. A handle whose slot was freed under the same generation is a double free;
    /// one from an older generation is stale.
    pub(crate) fn remove(&mut self, h: Handle) -> Result<T> {
        self.remove_if(h, |_| Ok(())).map(|(value, ())| value)
    }

    /// Checks `h` as [`Slots::remove`] does, passes the value to `f` and removes it only when
    /// `f` succeeds (its error is returned and the value stays): a free that must ask something
    /// first, such as whether the value's ticket completed, in one lookup instead of two.
    #[inline]
    pub(crate) fn remove_if<R>(
        &mut self,
        h: Handle,
        f: impl FnOnce(&T) -> Result<R>,
    ) -> Result<(T, R)> {
        let r = f(self.get_for_remove(h)?)?;
        let s = &mut self.slots[h.slot as usize];
        let value = s.value.take().ok_or_else(Self::empty_live_slot)?;
        self.free.push(h.slot);
        self.live -= 1;
        Ok((value, r))
    }

    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.value.as_ref())
    }

    /// The live values with the handles that name them.
    pub(crate) fn iter_handles(&self) -> impl Iterator<Item = (Handle, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.value.as_ref().map(|v| {
                (
                    Handle {
                        pool: self.pool,
                        slot: i as u32,
                        generation: s.generation,
                    },
                    v,
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_free_and_stale_use_are_errors() {
        let mut s = Slots::new(7, "allocation");
        let a = s.insert(1u32);
        assert_eq!(*s.get(a).unwrap(), 1);
        s.remove(a).unwrap();
        assert!(matches!(s.remove(a), Err(Error::DoubleFree { .. })));
        assert!(matches!(s.get(a), Err(Error::StaleHandle { .. })));
        // The slot is reused under a new generation; the old handle still fails.
        let b = s.insert(2u32);
        assert_eq!(b.slot(), a.slot());
        assert!(matches!(s.get(a), Err(Error::StaleHandle { .. })));
        assert!(matches!(s.remove(a), Err(Error::StaleHandle { .. })));
        assert_eq!(*s.get(b).unwrap(), 2);
    }

    #[test]
    fn remove_if_keeps_the_value_when_its_check_fails() {
        let mut s = Slots::new(3, "allocation");
        let a = s.insert(5u32);
        let refused = s.remove_if(a, |v| {
            assert_eq!(*v, 5);
            Err::<(), _>(Error::ZeroSize { what: "check" })
        });
        assert!(matches!(refused, Err(Error::ZeroSize { what: "check" })));
        assert_eq!((*s.get(a).unwrap(), s.len()), (5, 1));
        let (v, seen) = s.remove_if(a, |v| Ok(*v + 1)).unwrap();
        assert_eq!((v, seen, s.len()), (5, 6, 0));
        // The check runs before `f`: a double free never reaches it.
        let again = s.remove_if(a, |_| -> Result<()> { panic!("checked after the free") });
        assert!(matches!(again, Err(Error::DoubleFree { .. })));
    }

    #[test]
    fn foreign_handles_are_refused() {
        let mut s1 = Slots::new(1, "allocation");
        let mut s2 = Slots::new(2, "allocation");
        let a = s1.insert(());
        let _ = s2.insert(());
        assert!(matches!(s2.get(a), Err(Error::ForeignHandle { .. })));
        assert!(matches!(s2.remove(a), Err(Error::ForeignHandle { .. })));
        assert_eq!(s1.len(), 1);
        assert_eq!(s2.len(), 1);
    }
}
