//! The memory budget of a runtime and its one pressure path.
//!
//! A [`Budget`] is the account that every block reservation of device memory goes through, shared
//! by all pools of one runtime, plus the list of everything in that runtime that holds idle blocks
//! (arena pools, the staging belt). It sits *below* the pools, where RMM puts its limiting adaptor
//! (`pool_memory_resource<limiting_resource_adaptor<cuda_memory_resource>>`): a limit on what pools
//! hand out would not bound what they reserve, and reserved bytes are what the device runs out of.
//!
//! # The pressure path
//! When a pool cannot grow — the budget refuses the block, or the driver does — it trims its own
//! idle blocks and retries; if that fails it calls [`Budget::relieve`], which asks **every member**
//! of the runtime to return its idle blocks ([`Reclaim::release_idle`]), and retries once more;
//! only then does it report [`Error::OutOfMemory`](crate::Error::OutOfMemory). So memory one pool
//! holds idle is never what makes another pool fail (the conformance case
//! `one_pressure_path_across_device_pool_and_belt`).
//!
//! Lock order: a caller of `relieve` holds no pool lock, except the staging belt, which holds its
//! own and is skipped by id (it trimmed itself). Arena pools never wait on another lock while
//! holding theirs, so the order belt → arena cannot cycle.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::Result;

/// Something that holds blocks it can give back when they are idle.
pub trait Reclaim: Send + Sync {
    /// Returns every block that holds no live data (after reclaiming completed frees) to the
    /// backend. Returns the bytes released.
    ///
    /// # Errors
    /// Backend errors; blocks already released stay released.
    fn release_idle(&self) -> Result<u64>;
}

/// Identifies one member of a [`Budget`] (to skip the caller in [`Budget::relieve`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MemberId(usize);

/// A runtime's device-memory account and pressure path. See the module doc. `Send + Sync`.
pub struct Budget {
    limit: Option<u64>,
    reserved: AtomicU64,
    /// The account this one is part of: every byte reserved here is reserved there too, so a
    /// sub-account can never take more than its parent has room for.
    parent: Option<Arc<Budget>>,
    /// Highest `reserved` seen.
    peak_reserved: AtomicU64,
    next_member: AtomicUsize,
    members: Mutex<Vec<(MemberId, Weak<dyn Reclaim>)>>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("limit", &self.limit)
            .field("reserved", &self.reserved())
            .finish_non_exhaustive()
    }
}

impl Budget {
    /// A budget of at most `limit` reserved bytes (`None`: only the driver limits).
    pub fn new(limit: Option<u64>) -> Arc<Self> {
        Arc::new(Budget {
            limit,
            reserved: AtomicU64::new(0),
            peak_reserved: AtomicU64::new(0),
            parent: None,
            next_member: AtomicUsize::new(0),
            members: Mutex::new(Vec::new()),
        })
    }

    /// A sub-account of `parent` limited to `limit` bytes of its own: a reservation must fit both
    /// limits and is charged to both, so a budgeted model's pool stays within its own budget
    /// *and* shows in its runtime's account, where the runtime's other pools see it. Relief asks
    /// this account's members, then the parent's.
    pub fn sub_account(parent: &Arc<Budget>, limit: Option<u64>) -> Arc<Self> {
        Arc::new(Budget {
            limit,
            reserved: AtomicU64::new(0),
            peak_reserved: AtomicU64::new(0),
            parent: Some(parent.clone()),
            next_member: AtomicUsize::new(0),
            members: Mutex::new(Vec::new()),
        })
    }

    /// The limit in bytes, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Bytes reserved against the budget now.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// Highest bytes reserved against the budget at once (every pool and the staging belt
    /// together): what a per-device budget is checked against.
    pub fn peak_reserved(&self) -> u64 {
        self.peak_reserved.load(Ordering::Acquire)
    }

    /// Bytes that may still be reserved (`u64::MAX` without a limit), the parent's room included.
    pub fn room(&self) -> u64 {
        let own = self
            .limit
            .map_or(u64::MAX, |l| l.saturating_sub(self.reserved()));
        self.parent.as_ref().map_or(own, |p| own.min(p.room()))
    }

    /// Reserves `bytes` if they fit under the limit (and the parent's); `false` (and nothing
    /// reserved anywhere) otherwise.
    pub(crate) fn try_reserve(&self, bytes: u64) -> bool {
        let limit = self.limit.unwrap_or(u64::MAX);
        let Ok(before) = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                r.checked_add(bytes).filter(|n| *n <= limit)
            })
        else {
            return false;
        };
        if let Some(p) = &self.parent
            && !p.try_reserve(bytes)
        {
            self.reserved.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        self.peak_reserved
            .fetch_max(before + bytes, Ordering::AcqRel);
        true
    }

    /// Returns `bytes` reserved earlier with [`Budget::try_reserve`] (to the parent too).
    pub(crate) fn release(&self, bytes: u64) {
        self.reserved.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(p) = &self.parent {
            p.release(bytes);
        }
    }

    /// Adds a member that [`Budget::relieve`] asks for idle blocks. Members are held weakly: a
    /// dropped pool simply stops being asked.
    pub fn register(&self, member: Weak<dyn Reclaim>) -> MemberId {
        let id = MemberId(self.next_member.fetch_add(1, Ordering::Relaxed));
        let mut m = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        m.retain(|(_, w)| w.strong_count() > 0);
        m.push((id, member));
        id
    }

    /// Asks every member except `except` to release its idle blocks. Returns the bytes released.
    /// A member that fails (a lost device) is skipped; the first error is returned only when no
    /// member released anything, so a retry after partial relief still happens.
    ///
    /// # Errors
    /// The first member error, when nothing was released.
    pub fn relieve(&self, except: Option<MemberId>) -> Result<u64> {
        // Collect first: members are called without the list's lock held.
        let members: Vec<Arc<dyn Reclaim>> = self
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(id, _)| Some(*id) != except)
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        let mut released = 0u64;
        let mut first_error = None;
        for m in members {
            match m.release_idle() {
                Ok(n) => released = released.saturating_add(n),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(p) = &self.parent {
            match p.relieve(None) {
                Ok(n) => released = released.saturating_add(n),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if released == 0 => Err(e),
            _ => Ok(released),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    struct Idle(AtomicU64);
    impl Reclaim for Idle {
        fn release_idle(&self) -> Result<u64> {
            Ok(self.0.swap(0, Ordering::AcqRel))
        }
    }
    struct Lost;
    impl Reclaim for Lost {
        fn release_idle(&self) -> Result<u64> {
            Err(Error::DeviceLost {
                backend: "test",
                detail: "lost".into(),
            })
        }
    }

    #[test]
    fn reservations_never_exceed_the_limit() {
        let b = Budget::new(Some(100));
        assert!(b.try_reserve(60));
        assert!(!b.try_reserve(41), "61 + 41 > 100");
        assert_eq!(b.reserved(), 60);
        assert!(b.try_reserve(40));
        assert_eq!(b.room(), 0);
        b.release(100);
        assert_eq!(b.room(), 100);
        assert!(
            !b.try_reserve(u64::MAX),
            "overflow is a refusal, not a wrap"
        );
        let unlimited = Budget::new(None);
        assert!(unlimited.try_reserve(u64::MAX));
        assert!(!unlimited.try_reserve(1));
    }

    #[test]
    fn a_sub_account_fits_its_own_limit_and_its_parents_and_is_charged_to_both() {
        let parent = Budget::new(Some(100));
        let sub = Budget::sub_account(&parent, Some(60));
        assert!(parent.try_reserve(30));
        assert_eq!(sub.room(), 60);
        assert!(sub.try_reserve(50));
        assert_eq!((sub.reserved(), parent.reserved()), (50, 80));
        assert!(!sub.try_reserve(11), "over its own limit");
        assert_eq!(sub.room(), 10);
        assert!(parent.try_reserve(15));
        assert_eq!(
            sub.room(),
            5,
            "the parent has less room than the sub-account"
        );
        assert!(!sub.try_reserve(6), "over the parent's limit");
        assert_eq!(
            (sub.reserved(), parent.reserved()),
            (50, 95),
            "nothing kept"
        );
        sub.release(50);
        assert_eq!((sub.reserved(), parent.reserved()), (0, 45));
    }

    #[test]
    fn a_sub_accounts_relief_asks_its_parents_members_too() {
        let parent = Budget::new(None);
        let sub = Budget::sub_account(&parent, Some(10));
        let idle: Arc<dyn Reclaim> = Arc::new(Idle(AtomicU64::new(7)));
        parent.register(Arc::downgrade(&idle));
        assert_eq!(sub.relieve(None).unwrap(), 7);
    }

    #[test]
    fn relieve_asks_every_live_member_but_the_caller() {
        let b = Budget::new(None);
        let a: Arc<dyn Reclaim> = Arc::new(Idle(AtomicU64::new(10)));
        let c: Arc<dyn Reclaim> = Arc::new(Idle(AtomicU64::new(5)));
        let ia = b.register(Arc::downgrade(&a));
        b.register(Arc::downgrade(&c));
        {
            let gone: Arc<dyn Reclaim> = Arc::new(Idle(AtomicU64::new(1000)));
            b.register(Arc::downgrade(&gone));
        }
        assert_eq!(b.relieve(Some(ia)).unwrap(), 5);
        assert_eq!(b.relieve(None).unwrap(), 10);
        assert_eq!(b.relieve(None).unwrap(), 0);
    }

    #[test]
    fn a_failing_member_does_not_stop_relief() {
        let b = Budget::new(None);
        let lost: Arc<dyn Reclaim> = Arc::new(Lost);
        let idle: Arc<dyn Reclaim> = Arc::new(Idle(AtomicU64::new(7)));
        b.register(Arc::downgrade(&lost));
        b.register(Arc::downgrade(&idle));
        assert_eq!(b.relieve(None).unwrap(), 7);
        assert!(matches!(b.relieve(None), Err(Error::DeviceLost { .. })));
    }
}
