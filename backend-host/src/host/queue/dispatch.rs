//! Running one op on the host: the blocks its operands lie in are locked (in address order, as
//! every command locks them) and the op reads and writes them through `crate::kernels::run`.
//!
//! Operands usually lie in one block (an arena). A compiled plan never lets an op's output overlap
//! its own inputs, so outputs are written in place; only a direct caller's overlapping binding
//! takes the slower path of a fresh output buffer copied back.

use std::sync::{Arc, MutexGuard};

use super::{Arg, BlockMem, lock};
use crate::host::memory::HostMemory;
use crate::ops::Op;

/// Runs one op. Each distinct block is locked once, in address order (the lanes' workers share
/// the blocks). Operands may lie in one block (an arena); outputs may overlap inputs of later ops,
/// never of this one in a compiled plan, and are then written in place. Should a direct caller
/// bind an output over an input, the outputs are computed into fresh buffers and copied back.
pub(super) fn dispatch(op: &Op, args: &[Arg], n_inputs: usize) -> std::result::Result<(), String> {
    let mut blocks: Vec<&BlockMem> = Vec::new();
    for a in args {
        if !blocks.iter().any(|m| Arc::ptr_eq(m, &a.mem)) {
            blocks.push(&a.mem);
        }
    }
    blocks.sort_by_key(|m| Arc::as_ptr(m));
    let slot: Vec<usize> = args
        .iter()
        .map(|a| {
            blocks
                .iter()
                .position(|m| Arc::ptr_eq(m, &a.mem))
                .unwrap_or_default()
        })
        .collect();
    let mut guards: Vec<MutexGuard<'_, HostMemory>> = blocks.iter().map(|m| lock(m)).collect();
    if op.updates_output() {
        // The op changes a few slots of a large output (a KV segment): its inputs are copied out
        // (they are small) and the output is updated where it lies.
        let inputs: Vec<Vec<u8>> = args[..n_inputs]
            .iter()
            .zip(&slot)
            .map(|(a, &i)| guards[i][a.offset..a.offset + a.size].to_vec())
            .collect();
        let inputs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let (Some(a), Some(&i)) = (args.get(n_inputs), slot.get(n_inputs)) else {
            return Err(format!("{}: no output binding", op.name()));
        };
        let out = &mut guards[i][a.offset..a.offset + a.size];
        return crate::kernels::run(op, &inputs, &mut [out]).map_err(|e| e.to_string());
    }
    if outputs_apart(args, &slot, n_inputs) {
        return dispatch_in_place(op, args, &slot, n_inputs, &mut guards);
    }
    let mut outputs: Vec<Vec<u8>> = args[n_inputs..].iter().map(|a| vec![0u8; a.size]).collect();
    {
        let inputs: Vec<&[u8]> = args[..n_inputs]
            .iter()
            .zip(&slot)
            .map(|(a, &i)| &guards[i][a.offset..a.offset + a.size])
            .collect();
        let mut out_refs: Vec<&mut [u8]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
        crate::kernels::run(op, &inputs, &mut out_refs).map_err(|e| e.to_string())?;
    }
    for ((a, &i), out) in args[n_inputs..].iter().zip(&slot[n_inputs..]).zip(&outputs) {
        guards[i][a.offset..a.offset + a.size].copy_from_slice(out);
    }
    Ok(())
}

/// Whether every output binding is apart from every other binding in the same block (a compiled
/// plan never lets an op's output overlap its inputs; a direct caller may).
fn outputs_apart(args: &[Arg], slot: &[usize], n_inputs: usize) -> bool {
    let apart = |a: &Arg, b: &Arg| a.offset + a.size <= b.offset || b.offset + b.size <= a.offset;
    (n_inputs..args.len())
        .all(|o| (0..args.len()).all(|i| i == o || slot[i] != slot[o] || apart(&args[i], &args[o])))
}

/// [`dispatch`] when [`outputs_apart`] holds: the op reads its inputs and writes its outputs
/// where they lie in the locked blocks, with no fresh output buffer to zero and copy back (for a
/// batch of sentences those buffers are megabytes per op, each faulted in anew).
fn dispatch_in_place(
    op: &Op,
    args: &[Arg],
    slot: &[usize],
    n_inputs: usize,
    guards: &mut [MutexGuard<'_, HostMemory>],
) -> std::result::Result<(), String> {
    let bases: Vec<(*mut u8, usize)> = guards
        .iter_mut()
        .map(|g| {
            let mem: &mut [u8] = g;
            (mem.as_mut_ptr(), mem.len())
        })
        .collect();
    for (a, &i) in args.iter().zip(slot) {
        if a.offset
            .checked_add(a.size)
            .is_none_or(|end| end > bases[i].1)
        {
            return Err(format!(
                "{}: binding {}..+{} is outside its block of {} bytes",
                op.name(),
                a.offset,
                a.size,
                bases[i].1
            ));
        }
    }
    // SAFETY: `guards` lock every block for the whole call and are not touched while these
    // slices live, so nothing else reads or writes the memory. Each slice lies inside its block
    // (checked above). Each output slice is apart from every other slice of its block
    // (`outputs_apart`), so no byte is reachable through a `&mut` and another reference at once.
    let (inputs, mut outputs): (Vec<&[u8]>, Vec<&mut [u8]>) = unsafe {
        (
            args[..n_inputs]
                .iter()
                .zip(slot)
                .map(|(a, &i)| std::slice::from_raw_parts(bases[i].0.add(a.offset), a.size))
                .collect(),
            args[n_inputs..]
                .iter()
                .zip(&slot[n_inputs..])
                .map(|(a, &i)| std::slice::from_raw_parts_mut(bases[i].0.add(a.offset), a.size))
                .collect(),
        )
    };
    crate::kernels::run(op, &inputs, &mut outputs).map_err(|e| e.to_string())
}
