//! The NUMA topology as sysfs describes it, and the node closest to a device.
//!
//! Layout read (Linux, the same under a fake root in tests):
//!
//! ```text
//! <root>/devices/system/node/node<N>/cpulist    CPUs of node N: "0-3,8-11" (empty: memory only)
//! <root>/devices/system/node/node<N>/distance   distances to every node, in node order: "10 21"
//! <root>/bus/pci/devices/<bdf>/numa_node        the PCI device's node, or -1 (no affinity)
//! ```

use std::path::{Path, PathBuf};

use super::HostPlacement;
use crate::{Error, Result};

/// One NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    /// The node's number (`node<N>` in sysfs).
    pub id: u32,
    /// Its CPUs, ascending (empty for a memory-only node).
    pub cpus: Vec<u32>,
    /// ACPI SLIT distance to each node of the topology, in [`NumaTopology::nodes`] order (10 is
    /// local; larger is farther).
    pub distances: Vec<u32>,
}

/// The machine's NUMA nodes, read from sysfs.
///
/// Invariant: `nodes` is sorted by id, ids are distinct, and every node has one distance per
/// node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaTopology {
    /// The sysfs root it was read from (`/sys`, or a fake tree in tests).
    root: PathBuf,
    nodes: Vec<NumaNode>,
}

impl NumaTopology {
    /// Reads the running machine's topology from `/sys`.
    ///
    /// # Errors
    /// As [`NumaTopology::read`]; on a platform without sysfs (not Linux), [`Error::Io`].
    pub fn system() -> Result<Self> {
        Self::read("/sys")
    }

    /// Reads the topology under the sysfs root `root` (`/sys` on a real machine).
    ///
    /// # Errors
    /// [`Error::Io`] when the node directory or a node's file cannot be read, and
    /// [`Error::Malformed`] naming the file when its content is not what the kernel writes (a bad
    /// CPU list, a distance row whose length is not the node count, no node at all).
    pub fn read(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let dir = root.join("devices/system/node");
        let entries = std::fs::read_dir(&dir).map_err(|e| io_err(&dir, e))?;
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&dir, e))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_prefix("node")) else {
                continue;
            };
            // Other entries (`online`, `possible`, `has_cpu`, ...) are not nodes.
            if let Ok(id) = id.parse::<u32>() {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        if ids.is_empty() {
            return Err(malformed(&dir, "no node<N> directory".into()));
        }
        let mut nodes = Vec::with_capacity(ids.len());
        for &id in &ids {
            let node_dir = dir.join(format!("node{id}"));
            let cpus_path = node_dir.join("cpulist");
            let cpus = parse_cpu_list(&read(&cpus_path)?)
                .map_err(|message| malformed(&cpus_path, message))?;
            let dist_path = node_dir.join("distance");
            let distances = read(&dist_path)?
                .split_whitespace()
                .map(|d| d.parse::<u32>())
                .collect::<std::result::Result<Vec<u32>, _>>()
                .map_err(|e| malformed(&dist_path, format!("not a distance list: {e}")))?;
            if distances.len() != ids.len() {
                return Err(malformed(
                    &dist_path,
                    format!(
                        "{} distances for {} nodes (one per node expected)",
                        distances.len(),
                        ids.len()
                    ),
                ));
            }
            nodes.push(NumaNode {
                id,
                cpus,
                distances,
            });
        }
        Ok(NumaTopology { root, nodes })
    }

    /// The nodes, ascending by id.
    pub fn nodes(&self) -> &[NumaNode] {
        &self.nodes
    }

    /// The node numbered `id`.
    pub fn node(&self, id: u32) -> Option<&NumaNode> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The ACPI distance from node `from` to node `to` (10 is local), if both exist.
    pub fn distance(&self, from: u32, to: u32) -> Option<u32> {
        let to = self.nodes.iter().position(|n| n.id == to)?;
        self.node(from)?.distances.get(to).copied()
    }

    /// The node of the PCI device `bdf` (`"0000:65:00.0"`; `"65:00.0"` means domain 0; hex digits
    /// in either case), or `None` when the device has no NUMA affinity (`numa_node` reads -1).
    ///
    /// # Errors
    /// [`crate::ArgumentError::Invalid`] for a string that is not a PCI address (it becomes a path,
    /// so nothing else is accepted), [`Error::Io`] when the device's `numa_node` cannot be read (no
    /// such device), [`Error::Malformed`] when it is not a number, and [`Error::NumaNode`] for a
    /// node the topology does not have.
    pub fn pci_device_node(&self, bdf: &str) -> Result<Option<u32>> {
        let bdf = canonical_bdf(bdf)?;
        let path = self
            .root
            .join("bus/pci/devices")
            .join(&bdf)
            .join("numa_node");
        let text = read(&path)?;
        let node: i64 = text
            .trim()
            .parse()
            .map_err(|e| malformed(&path, format!("not a node number: {e}")))?;
        if node == -1 {
            return Ok(None);
        }
        let node = u32::try_from(node)
            .map_err(|_| malformed(&path, format!("node {node} is negative and not -1")))?;
        self.check_node(node)?;
        Ok(Some(node))
    }

    /// The placement for host memory that feeds a device on `device_node`, chosen by `source`
    /// ("configured", "PCI 0000:65:00.0", ...): [`HostPlacement::Bound`] to that node where there
    /// is a choice to make, otherwise [`HostPlacement::Unbound`] saying why (one node, no node
    /// known, not Linux).
    ///
    /// # Errors
    /// [`Error::NumaNode`] for a node the topology does not have, or (Linux) one the kernel does
    /// not let this process allocate on (its cpuset's `mems`), or whose allowed set cannot be
    /// read.
    pub fn placement(&self, device_node: Option<u32>, source: &str) -> Result<HostPlacement> {
        if self.nodes.len() < 2 {
            return Ok(HostPlacement::unbound("one NUMA node"));
        }
        let Some(node) = device_node else {
            return Ok(HostPlacement::unbound(format!(
                "{source} reports no NUMA node"
            )));
        };
        self.check_node(node)?;
        #[cfg(target_os = "linux")]
        {
            super::check_kernel_allows(node)?;
            Ok(HostPlacement::Bound {
                node,
                source: source.to_string(),
            })
        }
        #[cfg(not(target_os = "linux"))]
        Ok(HostPlacement::unbound("NUMA binding (mbind) is Linux-only"))
    }

    /// The placement for the host memory of the PCI device `bdf`, as a backend detects it:
    /// [`NumaTopology::pci_device_node`] then [`NumaTopology::placement`], with any error turned
    /// into [`HostPlacement::Unbound`] carrying its text (a backend must not fail to start because
    /// sysfs is odd; the report says why nothing was bound).
    pub fn pci_device_placement(&self, bdf: &str) -> HostPlacement {
        self.pci_device_node(bdf)
            .and_then(|node| self.placement(node, &format!("PCI {bdf}")))
            .unwrap_or_else(|e| HostPlacement::unbound(e.to_string()))
    }

    /// The placement for host memory that feeds a device, from what its driver reports: the host
    /// node the driver names itself (`driver_node`, with its source: CUDA's
    /// `CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID`), else the node sysfs gives its PCI address `bdf`, else
    /// none. A negative driver node (CUDA's and sysfs's -1) means "not known", as does a driver
    /// without the query (`None`): both fall through to the PCI address, whose `numa_node` of -1
    /// is unbound in turn.
    ///
    /// Never an error: a backend must start whatever the driver or sysfs say, so every failure
    /// (a node the topology lacks or the kernel refuses, an unreadable `numa_node`) is
    /// [`HostPlacement::Unbound`] carrying its text. On one node the reason is always "one NUMA
    /// node": there is nothing to choose, whatever the device reports.
    pub fn device_placement(
        &self,
        driver_node: Option<(i64, &str)>,
        bdf: Option<&str>,
    ) -> HostPlacement {
        if self.nodes.len() < 2 {
            return HostPlacement::unbound("one NUMA node");
        }
        let known =
            driver_node.and_then(|(node, source)| Some((u32::try_from(node).ok()?, source)));
        if let Some((node, source)) = known {
            return self
                .placement(Some(node), source)
                .unwrap_or_else(|e| HostPlacement::unbound(e.to_string()));
        }
        match bdf {
            Some(bdf) => self.pci_device_placement(bdf),
            None => HostPlacement::unbound(
                "the driver reports neither a host NUMA node nor a PCI address",
            ),
        }
    }

    fn check_node(&self, node: u32) -> Result<()> {
        if self.node(node).is_some() {
            return Ok(());
        }
        Err(Error::NumaNode {
            node,
            usable: self.nodes.iter().map(|n| n.id).collect(),
            reason: "the NUMA topology has no such node".into(),
        })
    }
}

/// [`NumaTopology::device_placement`] on the running machine (reads `/sys`): what a backend
/// uses at start. Every failure is [`HostPlacement::Unbound`] with its reason, never an error:
/// not Linux, a kernel without NUMA (no `/sys/devices/system/node`), unreadable sysfs.
pub fn detect_device_placement(
    driver_node: Option<(i64, &str)>,
    bdf: Option<&str>,
) -> HostPlacement {
    if !cfg!(target_os = "linux") {
        return HostPlacement::unbound("NUMA binding (mbind) is Linux-only");
    }
    if !Path::new("/sys/devices/system/node").exists() {
        return HostPlacement::unbound("no NUMA in this kernel (no /sys/devices/system/node)");
    }
    NumaTopology::system()
        .map(|t| t.device_placement(driver_node, bdf))
        .unwrap_or_else(|e| HostPlacement::unbound(e.to_string()))
}

/// `bdf` as sysfs names it (`dddd:bb:dd.f`, lower case), or
/// [`ArgumentError::Invalid`](crate::ArgumentError::Invalid).
fn canonical_bdf(bdf: &str) -> Result<String> {
    let bad = || {
        Error::from(crate::ArgumentError::invalid_value(
            "PCI address",
            bdf,
            "dddd:bb:dd.f",
        ))
    };
    let full = if bdf.matches(':').count() == 1 {
        format!("0000:{bdf}")
    } else {
        bdf.to_string()
    };
    let (rest, function) = full.split_once('.').ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let hex = |s: &str, len: usize| s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit());
    let ok = matches!(parts.as_slice(), [d, b, dev] if hex(d, 4) && hex(b, 2) && hex(dev, 2))
        && function.len() == 1
        && matches!(function.as_bytes()[0], b'0'..=b'7');
    if !ok {
        return Err(bad());
    }
    Ok(full.to_ascii_lowercase())
}

/// Widest range a CPU list may hold: far above any machine (the kernel's limit is 8192 CPUs), and
/// it keeps a corrupt file from expanding into gigabytes of CPU numbers.
const MAX_CPUS_PER_RANGE: u32 = 1 << 16;

/// Parses a kernel CPU list ("0-3,8,10-11"; empty for none) into ascending CPU numbers.
fn parse_cpu_list(text: &str) -> std::result::Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let num = |s: &str| {
            s.parse::<u32>()
                .map_err(|e| format!("{s:?} in CPU list {text:?}: {e}"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a >= MAX_CPUS_PER_RANGE {
                    return Err(format!(
                        "range {part:?} in CPU list is descending or spans more than \
                         {MAX_CPUS_PER_RANGE} CPUs"
                    ));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| io_err(path, e))
}

fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn malformed(path: &Path, message: String) -> Error {
    Error::Malformed {
        source_name: path.display().to_string(),
        line: 1,
        message,
    }
}
