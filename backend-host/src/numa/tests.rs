//! Topology parsing from fake sysfs trees, placement rules, and the kernel's own account of
//! bound pages. Not on `wasm32` (no topology there).
#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

use super::*;
use crate::Error;

/// A fake sysfs tree in a fresh temporary directory, removed on drop.
pub(crate) struct FakeSysfs {
    pub(crate) root: PathBuf,
}

impl FakeSysfs {
    /// A tree with one `node<N>` per `(cpulist, distance)` row, numbered from 0.
    pub(crate) fn new(nodes: &[(&str, &str)]) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = std::env::temp_dir().join(format!(
            "tensormem-sysfs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let fake = FakeSysfs { root };
        let dir = fake.root.join("devices/system/node");
        std::fs::create_dir_all(&dir).unwrap();
        // Entries that are not nodes, as on a real machine.
        std::fs::write(dir.join("online"), "0-1\n").unwrap();
        std::fs::create_dir_all(dir.join("power")).unwrap();
        for (i, (cpus, distance)) in nodes.iter().enumerate() {
            fake.file(&format!("devices/system/node/node{i}/cpulist"), cpus);
            fake.file(&format!("devices/system/node/node{i}/distance"), distance);
        }
        fake
    }

    /// The classic two-socket machine: node 0 with CPUs 0-3, node 1 with CPUs 4-7.
    pub(crate) fn two_nodes() -> Self {
        Self::new(&[("0-3\n", "10 21\n"), ("4-7\n", "21 10\n")])
    }

    /// Writes `text` to `rel` under the root, creating directories.
    pub(crate) fn file(&self, rel: &str, text: &str) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Adds PCI device `bdf` whose `numa_node` reads `node`.
    pub(crate) fn pci_device(&self, bdf: &str, node: &str) -> &Self {
        self.file(&format!("bus/pci/devices/{bdf}/numa_node"), node);
        self
    }

    pub(crate) fn path(&self) -> &Path {
        &self.root
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn reads_nodes_cpus_and_distances() {
    let fake = FakeSysfs::new(&[("0-1,4\n", "10 21\n"), ("\n", "21 10\n")]);
    let t = NumaTopology::read(fake.path()).unwrap();
    assert_eq!(t.nodes().len(), 2);
    assert_eq!(t.nodes()[0].cpus, vec![0, 1, 4]);
    assert!(t.nodes()[1].cpus.is_empty(), "memory-only node");
    assert_eq!(t.distance(0, 1), Some(21));
    assert_eq!(t.distance(1, 1), Some(10));
    assert_eq!(t.distance(0, 2), None);
}

#[test]
fn the_running_machine_has_at_least_one_node() {
    // Linux CI and this machine: sysfs exists; every CPU belongs to some node.
    let t = NumaTopology::system().unwrap();
    assert!(!t.nodes().is_empty());
    assert!(
        t.nodes()
            .iter()
            .all(|n| n.distances.len() == t.nodes().len())
    );
}

#[test]
fn malformed_sysfs_is_a_typed_error_naming_the_file() {
    let short = FakeSysfs::new(&[("0\n", "10\n"), ("1\n", "21 10\n")]);
    match NumaTopology::read(short.path()) {
        Err(Error::Malformed { source_name, .. }) => {
            assert!(source_name.ends_with("node0/distance"), "{source_name}")
        }
        other => panic!("a distance row of the wrong length: {other:?}"),
    }
    for bad in ["0-x", "3-1", "0-4294967295", "-", "1,,2a"] {
        let fake = FakeSysfs::new(&[(bad, "10\n")]);
        match NumaTopology::read(fake.path()) {
            Err(Error::Malformed { source_name, .. }) => {
                assert!(source_name.ends_with("cpulist"), "{bad}: {source_name}")
            }
            other => panic!("CPU list {bad:?}: {other:?}"),
        }
    }
    let none = FakeSysfs::new(&[]);
    assert!(matches!(
        NumaTopology::read(none.path()),
        Err(Error::Malformed { .. })
    ));
    assert!(matches!(
        NumaTopology::read(none.path().join("missing")),
        Err(Error::Io { .. })
    ));
    let no_distance = FakeSysfs::new(&[("0\n", "10\n")]);
    std::fs::remove_file(no_distance.root.join("devices/system/node/node0/distance")).unwrap();
    assert!(matches!(
        NumaTopology::read(no_distance.path()),
        Err(Error::Io { .. })
    ));
}

#[test]
fn pci_device_node_reads_sysfs() {
    let fake = FakeSysfs::two_nodes();
    fake.pci_device("0000:65:00.0", "1\n")
        .pci_device("0000:17:00.0", "-1\n")
        .pci_device("0000:18:00.0", "3\n")
        .pci_device("0000:19:00.0", "one\n");
    let t = NumaTopology::read(fake.path()).unwrap();
    assert_eq!(t.pci_device_node("0000:65:00.0").unwrap(), Some(1));
    // Short form (domain 0) and upper-case hex, as drivers print them.
    assert_eq!(t.pci_device_node("65:00.0").unwrap(), Some(1));
    assert_eq!(
        t.pci_device_node("0000:65:00.0".to_uppercase().as_str())
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        t.pci_device_node("0000:17:00.0").unwrap(),
        None,
        "-1: no affinity"
    );
    match t.pci_device_node("0000:18:00.0") {
        Err(Error::NumaNode { node, usable, .. }) => {
            assert_eq!((node, usable), (3, vec![0, 1]))
        }
        other => panic!("a node the topology lacks: {other:?}"),
    }
    assert!(matches!(
        t.pci_device_node("0000:19:00.0"),
        Err(Error::Malformed { .. })
    ));
    assert!(matches!(
        t.pci_device_node("0000:66:00.0"),
        Err(Error::Io { .. })
    ));
    // Anything that is not a PCI address never becomes a path.
    for bad in [
        "../../../etc",
        "0000:65:00",
        "0000:65:00.8",
        "zz:00.0",
        "",
        "0000:6:00.0",
    ] {
        assert!(
            matches!(
                t.pci_device_node(bad),
                Err(Error::Argument(crate::ArgumentError::Invalid { .. }))
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn one_node_or_no_device_node_is_unbound() {
    let one = FakeSysfs::new(&[("0-7\n", "10\n")]);
    let t = NumaTopology::read(one.path()).unwrap();
    let p = t.placement(Some(0), "configured").unwrap();
    assert_eq!(p, HostPlacement::unbound("one NUMA node"));
    assert_eq!(p.policy(), "none");
    assert_eq!(p.to_string(), "no NUMA (one NUMA node)");

    let two = FakeSysfs::two_nodes();
    let t = NumaTopology::read(two.path()).unwrap();
    let p = t.placement(None, "PCI 0000:17:00.0").unwrap();
    assert!(matches!(&p, HostPlacement::Unbound { reason } if reason.contains("no NUMA node")));
}

/// Node 0 exists on every Linux machine; node 1 on this one only in the fake topology, so
/// whether the kernel lets us use it decides between bound and the typed error.
#[cfg(target_os = "linux")]
#[test]
fn placement_binds_where_the_kernel_allows_the_node() {
    let fake = FakeSysfs::two_nodes();
    fake.pci_device("0000:65:00.0", "0\n")
        .pci_device("0000:b3:00.0", "1\n");
    let t = NumaTopology::read(fake.path()).unwrap();
    let p = t.pci_device_placement("0000:65:00.0");
    assert_eq!(
        p,
        HostPlacement::Bound {
            node: 0,
            source: "PCI 0000:65:00.0".into()
        }
    );
    assert_eq!(p.bound_node(), Some(0));
    assert_eq!(p.to_string(), "NUMA node 0 (bound, from PCI 0000:65:00.0)");

    let allowed = kernel::allowed_nodes().unwrap();
    let far = t.placement(Some(1), "configured");
    if allowed.contains(&1) {
        assert_eq!(far.unwrap().bound_node(), Some(1));
    } else {
        match far {
            Err(Error::NumaNode {
                node: 1, usable, ..
            }) => assert_eq!(usable, allowed),
            other => panic!("node 1 on a machine without it: {other:?}"),
        }
        // Detected by a backend: the same failure is the documented fallback, with its reason.
        let p = t.pci_device_placement("0000:b3:00.0");
        assert!(
            matches!(&p, HostPlacement::Unbound { reason } if reason.contains("NUMA node 1")),
            "{p:?}"
        );
    }
}

/// What a backend gets from its driver's answers: the driver's node where it names one, the PCI
/// device's node where the driver answers -1 or has no such query, and unbound (never an error)
/// for -1 everywhere, a missing device, or a node the topology lacks.
#[test]
fn device_placement_falls_back_from_the_driver_to_sysfs_to_unbound() {
    let fake = FakeSysfs::two_nodes();
    fake.pci_device("0000:65:00.0", "0\n")
        .pci_device("0000:17:00.0", "-1\n");
    let t = NumaTopology::read(fake.path()).unwrap();
    let cuda = |id: i64| Some((id, "CUDA host NUMA id"));
    let unbound_with = |p: HostPlacement, text: &str| {
        assert!(
            matches!(&p, HostPlacement::Unbound { reason } if reason.contains(text)),
            "{p:?} should be unbound with {text:?}"
        );
    };
    if cfg!(target_os = "linux") {
        let by_pci = HostPlacement::Bound {
            node: 0,
            source: "PCI 0000:65:00.0".into(),
        };
        // The driver names the node: it wins over the PCI address.
        let p = t.device_placement(cuda(0), Some("0000:17:00.0"));
        assert_eq!(
            p,
            HostPlacement::Bound {
                node: 0,
                source: "CUDA host NUMA id".into()
            }
        );
        // -1 (not known) and no attribute at all both fall through to sysfs.
        assert_eq!(t.device_placement(cuda(-1), Some("0000:65:00.0")), by_pci);
        assert_eq!(t.device_placement(None, Some("0000:65:00.0")), by_pci);
    }
    // -1 from the driver and from sysfs: the documented fallback.
    unbound_with(
        t.device_placement(cuda(-1), Some("0000:17:00.0")),
        "PCI 0000:17:00.0 reports no NUMA node",
    );
    unbound_with(t.device_placement(None, None), "neither");
    // A node the topology lacks, a device sysfs does not list, a bad address: unbound, with
    // the error's text.
    unbound_with(t.device_placement(cuda(7), None), "NUMA node 7");
    unbound_with(
        t.device_placement(cuda(-1), Some("0000:66:00.0")),
        "0000:66:00.0",
    );
    unbound_with(
        t.device_placement(None, Some("../etc")),
        "invalid PCI address",
    );

    // One node: nothing to choose, whatever the device says.
    let one = FakeSysfs::new(&[("0-7\n", "10\n")]);
    let t = NumaTopology::read(one.path()).unwrap();
    for driver in [cuda(0), cuda(-1), None] {
        assert_eq!(
            t.device_placement(driver, Some("0000:17:00.0")),
            HostPlacement::unbound("one NUMA node")
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
fn detect_device_placement_on_this_machine_never_fails() {
    let p = detect_device_placement(Some((0, "test device")), None);
    if NumaTopology::system().unwrap().nodes().len() < 2 {
        assert_eq!(p, HostPlacement::unbound("one NUMA node"));
    } else {
        assert_eq!(p.bound_node(), Some(0));
    }
    // A node no machine has, and no information at all: unbound with the reason, never a panic
    // or an error.
    for driver in [Some((999, "test device")), Some((-1, "test device")), None] {
        let p = detect_device_placement(driver, Some("ffff:ff:1f.7"));
        assert_eq!(p.bound_node(), None, "{p:?}");
    }
}

/// Reads the policy and the page nodes back from the kernel: the binding is applied to the
/// pages, not only requested.
#[cfg(target_os = "linux")]
#[test]
fn bind_preferred_is_applied_to_the_pages() {
    let page = 4096 * 4;
    let len = page * 8;
    // SAFETY: a fresh private anonymous mapping, checked against MAP_FAILED, unmapped below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED);
    let base = ptr.cast::<u8>();
    assert_eq!(
        kernel::range_policy(base as usize).unwrap().mode,
        kernel::PolicyMode::Default
    );
    // SAFETY: our own fresh mapping, page-aligned.
    unsafe { kernel::bind_preferred(base, len, 0) }.unwrap();
    let policy = kernel::range_policy(base as usize).unwrap();
    assert_eq!(policy.mode, kernel::PolicyMode::Preferred);
    assert_eq!(policy.nodes, vec![0]);
    let pages: Vec<*const u8> = (0..len)
        .step_by(4096)
        .map(|o| base.wrapping_add(o).cast_const())
        .collect();
    // Untouched pages are not present yet.
    assert!(
        kernel::page_nodes(&pages)
            .unwrap()
            .iter()
            .all(|s| *s == Err(libc::ENOENT))
    );
    // SAFETY: the mapping is ours and `len` bytes long.
    unsafe { std::ptr::write_bytes(base, 1, len) };
    assert!(
        kernel::page_nodes(&pages)
            .unwrap()
            .iter()
            .all(|s| *s == Ok(0))
    );
    // A node past the mask is refused before the call; one the kernel lacks by the kernel.
    // SAFETY: as above.
    assert!(unsafe { kernel::bind_preferred(base, len, 5000) }.is_err());
    if !kernel::allowed_nodes().unwrap().contains(&1) {
        // SAFETY: as above.
        assert!(unsafe { kernel::bind_preferred(base, len, 1) }.is_err());
    }
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(ptr, len) };
}
