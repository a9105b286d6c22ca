//! Linux memory policy: `mbind` on memory the runtime maps itself, and the queries that say where
//! pages actually are (`get_mempolicy`, `move_pages`). Raw system calls through `libc`: glibc does
//! not wrap them (libnuma does), and these four calls are all the runtime needs.

use std::io;

/// `get_mempolicy` flag: return the policy of the mapping that holds `addr`
/// (`<linux/mempolicy.h>`; libc does not define the `MPOL_F_*` flags).
const MPOL_F_ADDR: libc::c_ulong = 2;
/// `get_mempolicy` flag: return the nodes this process may allocate on (its cpuset's `mems`).
const MPOL_F_MEMS_ALLOWED: libc::c_ulong = 4;

/// Bits in the node masks passed to the kernel: the kernel's largest `CONFIG_NODES_SHIFT` (10).
const MASK_BITS: usize = 1024;
const WORD_BITS: usize = libc::c_ulong::BITS as usize;

type NodeMask = [libc::c_ulong; MASK_BITS / WORD_BITS];

/// A memory policy mode (`MPOL_*`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PolicyMode {
    /// `MPOL_DEFAULT`: the process's policy (first touch, normally).
    Default,
    /// `MPOL_PREFERRED`: the nodes first, others when they are full.
    Preferred,
    /// `MPOL_BIND`: only the nodes.
    Bind,
    /// `MPOL_INTERLEAVE`: pages spread round-robin over the nodes.
    Interleave,
    /// `MPOL_LOCAL`: the node of the CPU that faults the page in.
    Local,
    /// A mode this module does not name, as the kernel's number.
    Other(i32),
}

impl PolicyMode {
    fn from_raw(mode: libc::c_int) -> Self {
        match mode {
            libc::MPOL_DEFAULT => PolicyMode::Default,
            libc::MPOL_PREFERRED => PolicyMode::Preferred,
            libc::MPOL_BIND => PolicyMode::Bind,
            libc::MPOL_INTERLEAVE => PolicyMode::Interleave,
            libc::MPOL_LOCAL => PolicyMode::Local,
            other => PolicyMode::Other(other),
        }
    }
}

/// The policy of a mapping, as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemPolicy {
    /// The mode.
    pub mode: PolicyMode,
    /// The nodes of the policy, ascending (empty for `Default` and `Local`).
    pub nodes: Vec<u32>,
}

/// Sets the policy of the pages in `[addr, addr + len)` to `MPOL_PREFERRED` on `node`: pages
/// faulted in afterwards come from `node` while it has free memory. Pages already present stay
/// where they are, so call it before the first touch.
///
/// # Errors
/// The OS error: `EINVAL` for a node the kernel does not have or (`addr` not page-aligned), `EFAULT`
/// for a range that is not mapped, `ENOMEM`.
///
/// # Safety
/// `addr` is page-aligned and `[addr, addr + len)` lies in mappings the caller owns (the policy
/// of any other memory in the range, such as the allocator's heap, would change with it).
pub unsafe fn bind_preferred(addr: *mut u8, len: usize, node: u32) -> io::Result<()> {
    let mask = mask_of(node)?;
    // SAFETY: mbind reads `mask` (MASK_BITS bits; the kernel reads maxnode - 1 bits, hence the
    // + 1 that libnuma also passes) and changes only the policy of the caller's range.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len as libc::c_ulong,
            libc::MPOL_PREFERRED as libc::c_ulong,
            mask.as_ptr(),
            (MASK_BITS + 1) as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The nodes this process may allocate on (its cpuset's `mems`), ascending.
///
/// # Errors
/// The OS error of `get_mempolicy`.
pub fn allowed_nodes() -> io::Result<Vec<u32>> {
    let mut mask: NodeMask = [0; MASK_BITS / WORD_BITS];
    // SAFETY: the kernel writes at most MASK_BITS bits into `mask`; no address is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            std::ptr::null_mut::<libc::c_int>(),
            mask.as_mut_ptr(),
            MASK_BITS as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            MPOL_F_MEMS_ALLOWED,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(nodes_of(&mask))
}

/// The policy of the mapping that holds the address `addr` (an address, not a pointer: the kernel
/// looks it up, nothing reads through it).
///
/// # Errors
/// The OS error (`EFAULT` for an address that is not mapped).
pub fn range_policy(addr: usize) -> io::Result<MemPolicy> {
    let mut mode: libc::c_int = 0;
    let mut mask: NodeMask = [0; MASK_BITS / WORD_BITS];
    // SAFETY: the kernel writes one int into `mode` and at most MASK_BITS bits into `mask`; it
    // only looks `addr` up in this process's mappings, never dereferences it for us.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            MASK_BITS as libc::c_ulong,
            addr as *const libc::c_void,
            MPOL_F_ADDR,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(MemPolicy {
        mode: PolicyMode::from_raw(mode),
        nodes: nodes_of(&mask),
    })
}

/// The node that holds each page of `pages` (addresses inside this process's mappings), read with
/// `move_pages` without moving anything: `Ok(node)` for a present page, `Err(errno)` for one that
/// is not (`ENOENT`: never touched, `EFAULT`: not mapped).
///
/// # Errors
/// The OS error of the call itself.
pub fn page_nodes(pages: &[*const u8]) -> io::Result<Vec<Result<u32, i32>>> {
    let mut status: Vec<libc::c_int> = vec![0; pages.len()];
    // SAFETY: with a null `nodes` array move_pages only reports, into `status` (one int per page);
    // the addresses are looked up in this process's page tables (pid 0), never dereferenced.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::pid_t,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0 as libc::c_int,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(status
        .into_iter()
        .map(|s| u32::try_from(s).map_err(|_| -s))
        .collect())
}

fn mask_of(node: u32) -> io::Result<NodeMask> {
    let node = node as usize;
    if node >= MASK_BITS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NUMA node {node} is past the largest node mask ({MASK_BITS} nodes)"),
        ));
    }
    let mut mask: NodeMask = [0; MASK_BITS / WORD_BITS];
    mask[node / WORD_BITS] |= 1 << (node % WORD_BITS);
    Ok(mask)
}

fn nodes_of(mask: &NodeMask) -> Vec<u32> {
    (0..MASK_BITS)
        .filter(|&n| mask[n / WORD_BITS] & (1 << (n % WORD_BITS)) != 0)
        .map(|n| n as u32)
        .collect()
}
