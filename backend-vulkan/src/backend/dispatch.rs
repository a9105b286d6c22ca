//! Recording one kernel dispatch: binding checks, the pipeline from the cache, a parameter slot
//! and a descriptor set from the open batch, the hazard barrier, then bind and dispatch.

use ash::vk;
use tensormem_contract::{BlockRange, Error, Result, Ticket};

use super::VulkanBackend;
use crate::barriers::Access;
use crate::conv::Stage;
use crate::error::{BACKEND, vk_err};
use crate::kernels::KernelSpec;
use crate::timeline::{MAX_STORAGE_BINDINGS, PARAMS_SIZE};

impl VulkanBackend {
    /// Enqueues `spec` over `bindings` (one range per storage slot, in order).
    ///
    /// # Errors
    /// [`Error::SizeMismatch`] for a binding count that does not fit, [`Error::Misaligned`] for a
    /// binding offset; [`Error::TooLarge`] for a binding beyond `max_binding_size` or too many
    /// workgroups; [`Error::Unsupported`] for more storage bindings than a set holds; compile
    /// failures.
    pub(crate) fn dispatch_spec(
        &self,
        spec: &KernelSpec<'_>,
        bindings: &[BlockRange],
    ) -> Result<Ticket> {
        if spec.storage.len() != bindings.len() {
            return Err(Error::SizeMismatch {
                what: format!("storage bindings of kernel {}", spec.key),
                expected: spec.storage.len() as u64,
                actual: bindings.len() as u64,
            });
        }
        if bindings.len() > MAX_STORAGE_BINDINGS as usize {
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: format!(
                    "{} storage bindings in one kernel (at most {MAX_STORAGE_BINDINGS})",
                    bindings.len()
                ),
            });
        }
        let mut guard = self.lock();
        let s = &mut *guard;
        s.check_alive()?;
        let max_groups = s.gpu.limits.max_compute_work_group_count;
        for (i, (&g, &max)) in spec.workgroups.iter().zip(max_groups.iter()).enumerate() {
            if g > max {
                return Err(Error::TooLarge {
                    what: ["workgroups x", "workgroups y", "workgroups z"][i],
                    requested: u64::from(g),
                    limit: u64::from(max),
                    limit_name: "maxComputeWorkGroupCount",
                });
            }
        }
        let mut accesses = Vec::with_capacity(bindings.len());
        for (r, slot) in bindings.iter().zip(&spec.storage) {
            Self::check_range(s, r, "binding")?;
            Error::check_limit(
                "binding",
                r.size,
                self.caps.max_binding_size,
                "max_binding_size (maxStorageBufferRange)",
            )?;
            if r.offset % self.caps.binding_align != 0 {
                return Err(Error::Misaligned {
                    what: "binding offset",
                    value: r.offset,
                    align: self.caps.binding_align,
                    align_name: "binding_align",
                });
            }
            accesses.push(Access {
                block: r.block.0,
                offset: r.offset,
                size: r.size,
                stage: Stage::Compute,
                write: slot.write,
            });
        }
        let device = s.gpu.device.clone();
        let pipeline = s.kernels.get(&device, spec)?;
        let (pipe, layout, set_layout) = (pipeline.pipeline, pipeline.layout, pipeline.set_layout);
        let slot_size = s.compute.slot_size;
        let mut batch = s.compute.batch(&s.gpu, &mut s.allocator)?;
        if !batch.has_dispatch_room() {
            s.compute.submit(&s.gpu)?;
            batch = s.compute.batch(&s.gpu, &mut s.allocator)?;
        }
        let (cmd, pool) = (batch.cmd(), batch.descriptor_pool());
        let (params_buffer, params_offset) =
            batch.push_params(&spec.params, slot_size).ok_or_else(|| {
                Error::invariant(
                    "a compute batch owns a parameter buffer",
                    "vulkan: compute batch without a parameter buffer",
                )
            })?;
        let layouts = [set_layout];
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(pool)
            .set_layouts(&layouts);
        // SAFETY: the pool has room (one set per parameter slot, checked above) and the layout
        // is live.
        let set = unsafe { device.allocate_descriptor_sets(&info) }
            .map_err(vk_err("vkAllocateDescriptorSets"))?
            .first()
            .copied()
            .unwrap_or_default();
        let buffer_infos: Vec<[vk::DescriptorBufferInfo; 1]> = bindings
            .iter()
            .map(|r| {
                let buffer = s.blocks.get(r.block).map(|b| b.buffer).unwrap_or_default();
                [vk::DescriptorBufferInfo::default()
                    .buffer(buffer)
                    .offset(r.offset)
                    .range(r.size)]
            })
            .collect();
        let params_info = [vk::DescriptorBufferInfo::default()
            .buffer(params_buffer)
            .offset(params_offset)
            .range(PARAMS_SIZE)];
        let mut writes: Vec<vk::WriteDescriptorSet<'_>> = spec
            .storage
            .iter()
            .zip(&buffer_infos)
            .map(|(slot, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(slot.binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        writes.push(
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(spec.params_binding)
                .descriptor_type(vk::DescriptorType::UNIFORM_BUFFER)
                .buffer_info(&params_info),
        );
        // SAFETY: the set is fresh (not bound by any pending command); every buffer is live,
        // offsets are aligned and ranges within bounds and limits (checked above).
        unsafe { device.update_descriptor_sets(&writes, &[]) };
        if let Some(b) = s.compute.tracker.before(&accesses)
            && !self.config.skip_barriers_for_testing
        {
            s.compute.record_barrier(&device, cmd, b);
        }
        // SAFETY: `cmd` is recording on a compute-capable family; the pipeline, layout and set
        // match (same kernel key).
        unsafe {
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipe);
            device.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                layout,
                0,
                &[set],
                &[],
            );
            device.cmd_dispatch(
                cmd,
                spec.workgroups[0],
                spec.workgroups[1],
                spec.workgroups[2],
            );
        }
        s.compute.note_command();
        Ok(s.compute.open_ticket())
    }
}
