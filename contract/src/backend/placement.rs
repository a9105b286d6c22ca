//! [`HostPlacement`]: where a backend's host memory lives, as the backend reports it in its
//! [`Capabilities`](crate::Capabilities) and the memory report carries. A plain fact of the
//! backend contract; how the runtime binds memory and reads the machine's topology is
//! [`crate::numa`].

use std::fmt;

/// Where a backend's host memory (upload, readback and host-visible blocks) lives: the policy in
/// use, reported by [`Capabilities::host_placement`](crate::Capabilities::host_placement) and in
/// the memory report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPlacement {
    /// The runtime binds the host memory it maps itself to `node` (`MPOL_PREFERRED`) before its
    /// first touch.
    Bound {
        /// The NUMA node.
        node: u32,
        /// How the node was chosen ("configured", "PCI 0000:65:00.0", "CUDA host NUMA id").
        source: String,
    },
    /// The driver allocates the host-visible memory and places its pages; this runtime cannot
    /// bind them.
    DriverPlaced {
        /// The device's node, where the backend learnt it (`VK_EXT_pci_bus_info` + sysfs).
        device_node: Option<u32>,
    },
    /// No NUMA placement: host memory goes wherever the OS puts it (first touch).
    Unbound {
        /// Why ("one NUMA node", "not Linux", "the device reports no NUMA node", ...).
        reason: String,
    },
}

impl HostPlacement {
    /// [`HostPlacement::Unbound`] with `reason`.
    pub fn unbound(reason: impl Into<String>) -> Self {
        HostPlacement::Unbound {
            reason: reason.into(),
        }
    }

    /// The node the runtime binds host memory to, if it binds any.
    pub fn bound_node(&self) -> Option<u32> {
        match self {
            HostPlacement::Bound { node, .. } => Some(*node),
            _ => None,
        }
    }

    /// A short machine-readable name of the policy: `"bound"`, `"driver"` or `"none"`.
    pub fn policy(&self) -> &'static str {
        match self {
            HostPlacement::Bound { .. } => "bound",
            HostPlacement::DriverPlaced { .. } => "driver",
            HostPlacement::Unbound { .. } => "none",
        }
    }
}

impl Default for HostPlacement {
    /// Unbound: what a backend that says nothing about its host memory gets.
    fn default() -> Self {
        HostPlacement::unbound("not reported by the backend")
    }
}

impl fmt::Display for HostPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPlacement::Bound { node, source } => {
                write!(f, "NUMA node {node} (bound, from {source})")
            }
            HostPlacement::DriverPlaced {
                device_node: Some(n),
            } => write!(
                f,
                "placed by the driver (device on NUMA node {n}; cannot be bound)"
            ),
            HostPlacement::DriverPlaced { device_node: None } => {
                write!(f, "placed by the driver (device's NUMA node unknown)")
            }
            HostPlacement::Unbound { reason } => write!(f, "no NUMA ({reason})"),
        }
    }
}
