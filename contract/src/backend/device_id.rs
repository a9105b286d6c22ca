//! [`DeviceId`]: which device of a `DeviceSet` (in `tensormem`) a runtime, a tensor or an
//! error belongs to. Part of the backend contract so that every layer above (errors, tensors,
//! device sets) names devices without depending on the multi-device module.

use std::fmt;

/// One device of a `DeviceSet` (in `tensormem`): its index in the set.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u32);

impl DeviceId {
    /// The index as a `usize`, for indexing the set's devices.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.0)
    }
}
