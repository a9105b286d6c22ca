//! NUMA-aware host memory: where the host memory that feeds a device lives.
//!
//! On a machine with several NUMA nodes (multi-socket servers, GPU nodes with one PCIe root per
//! socket), a pinned or host-visible buffer on the far socket costs every upload and readback a
//! trip over the socket interconnect. The pools' host memory (upload and readback blocks, the
//! staging belt's blocks, the host backend's blocks) therefore belongs on the node closest to its
//! device. This module holds the three pieces every backend shares:
//!
//! * [`NumaTopology`]: the nodes, their CPUs and their distances, read from sysfs
//!   (`/sys/devices/system/node`), and the node of a PCI device
//!   (`/sys/bus/pci/devices/<bdf>/numa_node`). The sysfs root is a parameter, so tests inject a
//!   topology with several nodes from a fake tree in a temporary directory.
//! * [`HostPlacement`] (defined with the backend contract, re-exported here): the policy in use,
//!   as a value a backend reports ([`Capabilities::host_placement`](tensormem_contract::Capabilities::host_placement))
//!   and the memory report carries.
//! * [`kernel`] (Linux only): `mbind` on memory the runtime maps itself, and the kernel queries
//!   (`get_mempolicy`, `move_pages`) that say where pages actually are.
//!
//! # Policy
//! Memory is bound with `MPOL_PREFERRED` to the device's node **before its first touch** (a page
//! is placed when it is first faulted in, so a policy set afterwards only moves pages if asked
//! to). Preferred, not `MPOL_BIND`: a full node then spills to the next one instead of turning
//! into an OOM kill or a `SIGBUS` on first touch, the trade every NUMA-aware allocator makes for
//! buffers that are only *faster* near their device (DPDK's and hwloc's default for the same).
//!
//! # What can and cannot be bound
//! * **Memory the runtime maps itself** (`mmap`): bound. The host backend's blocks, and CUDA
//!   pinned blocks allocated as `mmap` + `mbind` + `cuMemHostRegister` when the device has a
//!   host NUMA node.
//! * **Memory the driver allocates** (Vulkan host-visible memory through gpu-allocator, wgpu
//!   buffers): the driver places its pages, this runtime cannot bind them; the backend reports
//!   [`HostPlacement::DriverPlaced`] with the device's node where it knows it.
//!
//! # Fallbacks
//! * One node, a kernel without NUMA, not Linux, or a device with no NUMA affinity (a driver
//!   answering -1, a PCI `numa_node` of -1): [`HostPlacement::Unbound`] with the reason.
//!   `wasm32` compiles only [`HostPlacement`] (the browser owns its memory).
//! * A node the topology lacks or the kernel refuses this process (cpuset `mems`):
//!   [`Error::NumaNode`](crate::Error::NumaNode) where the caller asked for that node, else
//!   [`HostPlacement::Unbound`] carrying the error's text.
//! * Malformed sysfs content: [`Error::Malformed`](crate::Error::Malformed) naming the file.

pub use crate::backend::HostPlacement;

#[cfg(target_os = "linux")]
pub mod kernel;
#[cfg(not(target_arch = "wasm32"))]
mod topology;

#[cfg(not(target_arch = "wasm32"))]
pub use topology::{NumaNode, NumaTopology, detect_device_placement};

/// Checks that the kernel lets this process allocate on `node` (its cpuset's `mems`).
///
/// # Errors
/// [`Error::NumaNode`](crate::Error::NumaNode) with the allowed nodes, or with none when they
/// cannot be read.
#[cfg(target_os = "linux")]
pub(crate) fn check_kernel_allows(node: u32) -> crate::Result<()> {
    let allowed = kernel::allowed_nodes().map_err(|e| crate::Error::NumaNode {
        node,
        usable: Vec::new(),
        reason: format!("the kernel's allowed nodes cannot be read: {e}"),
    })?;
    if allowed.contains(&node) {
        return Ok(());
    }
    Err(crate::Error::NumaNode {
        node,
        usable: allowed,
        reason: "the kernel does not let this process allocate on it".into(),
    })
}

/// Also the fake sysfs tree other modules' tests inject.
#[cfg(test)]
pub(crate) mod tests;
