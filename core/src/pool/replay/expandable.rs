//! [`Expandable`] for [`ReplayPool`]: expandable allocations come from the dynamic pool below and
//! never enter a step's recording (a growing buffer, such as a KV cache segment, outlives the
//! steps and its growth is no step's allocation), so plans stay the same with or without them.

use super::{ReplayPool, Source};
use crate::pool::device_pool::{Allocation, DevicePool};
use crate::pool::{Expandable, ExpandableDesc, Handle};
use crate::{Error, Result};

impl ReplayPool {
    fn dynamic_expandable(&self) -> Result<&dyn Expandable> {
        self.pool.expandable().ok_or_else(|| Error::Unsupported {
            backend: self.pool.backend().capabilities().backend,
            what: "expandable allocations from a replay pool whose dynamic pool has none".into(),
        })
    }
}

impl Expandable for ReplayPool {
    fn allocate_expandable(&self, desc: &ExpandableDesc<'_>) -> Result<Option<Allocation>> {
        let Some(dynamic) = self.pool.expandable() else {
            return Ok(None);
        };
        let mut st = self.lock();
        let Some(a) = dynamic.allocate_expandable(desc)? else {
            return Ok(None);
        };
        self.note_peak(&mut st);
        Ok(Some(Self::unrecorded(&mut st, a, desc.label)))
    }

    fn expand(&self, handle: Handle, size: u64) -> Result<Allocation> {
        let mut st = self.lock();
        let Source::Dynamic(inner) = st.slots.get(handle)?.source else {
            return Err(Error::Unsupported {
                backend: self.pool.backend().capabilities().backend,
                what: "expanding a planned replay allocation".into(),
            });
        };
        let a = self.dynamic_expandable()?.expand(inner, size)?;
        st.slots.get_mut(handle)?.size = a.range.size;
        self.note_peak(&mut st);
        Ok(Allocation {
            handle,
            range: a.range,
        })
    }
}
