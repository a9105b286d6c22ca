//! Compute pipelines for the standard ops, cached per kernel key, and their bind groups.
//!
//! `tensormem_contract::ops::wgsl::kernel` gives each op's WGSL module, its 16-word uniform block and its
//! workgroup counts. Pipelines are compiled once per key (`matmul`, `matmul_bias`, ...) against
//! an explicit layout per operand count: `n` read-write storage buffers, then one uniform
//! buffer, all in group 0 (the ABI in `ops::wgsl`). An explicit layout (rather than one derived
//! from the shader) lets every pipeline with the same operand count share one bind group layout.
//!
//! Each dispatch binds its operands as `(buffer, offset, size)` ranges, so planner-assigned
//! offsets inside one arena work unchanged, and its 64-byte uniform block as a slot of the
//! parameter ring (`params`).
//!
//! Compilation errors are caught by an error scope natively. In a browser popping a scope is a
//! promise that cannot be awaited inside a synchronous call, so there the uncaptured-error handler
//! reports them on the next call instead (see `error::Health`).

use std::collections::HashMap;

use tensormem_contract::Result;
use tensormem_contract::ops::wgsl::Kernel;

/// Layouts shared by every kernel with the same operand count.
#[derive(Debug)]
struct Layout {
    bind_group: wgpu::BindGroupLayout,
    pipeline: wgpu::PipelineLayout,
}

/// Compiled pipelines by kernel key, and layouts by operand count.
#[derive(Debug, Default)]
pub(crate) struct KernelCache {
    layouts: HashMap<usize, Layout>,
    pipelines: HashMap<&'static str, wgpu::ComputePipeline>,
}

impl KernelCache {
    /// Number of compiled pipelines (for tests).
    pub(crate) fn pipelines(&self) -> usize {
        self.pipelines.len()
    }

    fn layout(&mut self, device: &wgpu::Device, operands: usize) -> &Layout {
        self.layouts.entry(operands).or_insert_with(|| {
            let storage = |binding: u32| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            };
            let mut entries: Vec<_> = (0..operands as u32).map(storage).collect();
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: operands as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
            let bind_group = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("tensormem op bindings"),
                entries: &entries,
            });
            let pipeline = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some("tensormem op layout"),
                bind_group_layouts: &[Some(&bind_group)],
                immediate_size: 0,
            });
            Layout {
                bind_group,
                pipeline,
            }
        })
    }

    /// The pipeline for `kernel`, compiling it on first use.
    ///
    /// # Errors
    /// [`tensormem_contract::Error::Backend`] when wgpu rejects the shader or the pipeline (an error
    /// scope catches it instead of the panicking default handler).
    pub(crate) fn pipeline(
        &mut self,
        device: &wgpu::Device,
        kernel: &Kernel,
    ) -> Result<wgpu::ComputePipeline> {
        if let Some(p) = self.pipelines.get(kernel.key) {
            return Ok(p.clone());
        }
        let layout = &self.layout(device, kernel.bindings).pipeline;
        #[cfg(not(target_arch = "wasm32"))]
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.key),
            source: wgpu::ShaderSource::Wgsl(kernel.source.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.key),
            layout: Some(layout),
            module: &module,
            entry_point: Some(kernel.entry_point),
            compilation_options: Default::default(),
            cache: None,
        });
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(crate::error::map_scope_error(
                error,
                "Device::create_compute_pipeline",
                0,
            ));
        }
        self.pipelines.insert(kernel.key, pipeline.clone());
        Ok(pipeline)
    }

    /// Records one dispatch of `kernel` over `operands` (`(buffer, offset, size)`, already
    /// validated) into `encoder`, with its parameters at `params` (a ring slot holding
    /// `kernel.params_bytes()`).
    ///
    /// # Errors
    /// As [`KernelCache::pipeline`].
    pub(crate) fn record(
        &mut self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        kernel: &Kernel,
        operands: &[(wgpu::Buffer, u64, u64)],
        params: (&wgpu::Buffer, u64),
    ) -> Result<()> {
        debug_assert_eq!(operands.len(), kernel.bindings);
        let pipeline = self.pipeline(device, kernel)?;
        let mut entries: Vec<wgpu::BindGroupEntry<'_>> = Vec::with_capacity(operands.len() + 1);
        for (i, (buffer, offset, size)) in operands.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: *offset,
                    size: wgpu::BufferSize::new(*size),
                }),
            });
        }
        entries.push(wgpu::BindGroupEntry {
            binding: operands.len() as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: params.0,
                offset: params.1,
                size: wgpu::BufferSize::new(kernel.params_bytes().len() as u64),
            }),
        });
        let layout = &self.layout(device, kernel.bindings).bind_group;
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(kernel.key),
            layout,
            entries: &entries,
        });
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(kernel.key),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        let [x, y, z] = kernel.workgroups;
        pass.dispatch_workgroups(x, y, z);
        Ok(())
    }
}
