//! Kernels: WGSL → SPIR-V with naga (validated), compute pipelines cached per kernel key, and the
//! descriptor set of one dispatch.
//!
//! The WGSL sources are the ones wgpu runs (`tensormem_contract::ops::wgsl`), so both GPU backends execute
//! the same code. naga's SPIR-V writer maps `@group(0) @binding(b)` to `set = 0, binding = b`
//! (`fake_missing_bindings`), so the descriptor set layout is built straight from the binding
//! ABI: one storage buffer per operand and one uniform buffer of 16 `u32` parameters. Compiling
//! takes a few milliseconds, so each kernel key is compiled once per backend and its
//! `VkPipeline` kept until the backend is dropped.

use std::collections::HashMap;

use ash::vk;
use tensormem_contract::{Error, Result};

use crate::error::{BACKEND, vk_err};

/// One storage binding of a kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct StorageSlot {
    /// `@binding` in group 0.
    pub binding: u32,
    /// Whether the kernel writes it (decides the hazard access).
    pub write: bool,
}

/// Everything needed to run one kernel, independent of where its WGSL came from.
#[derive(Clone, Debug)]
pub(crate) struct KernelSpec<'a> {
    /// Cache key: identifies `source` + `entry` (+ any specialisation baked into the source).
    pub key: &'a str,
    /// WGSL source.
    pub source: &'a str,
    /// Entry point name.
    pub entry: &'a str,
    /// Storage bindings, in the order of the op's bindings (inputs, then outputs).
    pub storage: Vec<StorageSlot>,
    /// `@binding` of the uniform parameter block.
    pub params_binding: u32,
    /// The 16 parameter words.
    pub params: [u32; 16],
    /// Workgroup counts.
    pub workgroups: [u32; 3],
}

/// Compiles WGSL to validated SPIR-V words.
///
/// # Errors
/// [`Error::Backend`] (api `naga`) with naga's diagnostic when parsing, validation or SPIR-V
/// generation fails.
pub(crate) fn compile_wgsl(source: &str, entry: &str) -> Result<Vec<u32>> {
    let fail = |stage: &'static str, message: String| Error::Backend {
        backend: BACKEND,
        api: stage,
        code: 0,
        message,
    };
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| fail("naga::front::wgsl::parse_str", e.emit_to_string(source)))?;
    // `unpack2x16float` (f16 weights) is core WGSL and core Vulkan (GLSL.std.450
    // UnpackHalf2x16); naga gates it behind this capability for targets that lack it.
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32,
    )
    .validate(&module)
    .map_err(|e| fail("naga::valid::Validator::validate", e.emit_to_string(source)))?;
    let mut options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    // Debug names are useful in validation messages but cost nothing at run time.
    options.flags |= naga::back::spv::WriterFlags::DEBUG;
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_owned(),
    };
    naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
        .map_err(|e| fail("naga::back::spv::write_vec", e.to_string()))
}

/// A compiled kernel.
pub(crate) struct Pipeline {
    pub set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pub pipeline: vk::Pipeline,
}

/// Pipelines by kernel key.
#[derive(Default)]
pub(crate) struct KernelCache {
    pipelines: HashMap<String, Pipeline>,
    /// WGSL compilations performed (cache misses).
    pub compiles: u64,
}

impl KernelCache {
    /// The pipeline of `spec`, compiling and creating it on first use.
    ///
    /// # Errors
    /// Compilation failures ([`compile_wgsl`]) and native failures creating the objects.
    pub(crate) fn get(&mut self, device: &ash::Device, spec: &KernelSpec<'_>) -> Result<&Pipeline> {
        if !self.pipelines.contains_key(spec.key) {
            let words = compile_wgsl(spec.source, spec.entry)?;
            self.compiles += 1;
            let p = create_pipeline(device, spec, &words)?;
            self.pipelines.insert(spec.key.to_owned(), p);
        }
        self.pipelines.get(spec.key).ok_or_else(|| {
            Error::invariant(
                "an inserted pipeline stays in the cache",
                "vulkan: pipeline missing after insertion",
            )
        })
    }

    /// Destroys every pipeline.
    ///
    /// # Safety
    /// No pending command uses them; called once.
    pub(crate) unsafe fn destroy(&mut self, device: &ash::Device) {
        for (_, p) in self.pipelines.drain() {
            // SAFETY: the caller guarantees the device no longer uses them.
            unsafe { destroy_pipeline(device, &p) };
        }
    }
}

/// # Safety
/// The objects are idle.
unsafe fn destroy_pipeline(device: &ash::Device, p: &Pipeline) {
    // SAFETY: idle objects of this device; null handles are ignored.
    unsafe {
        device.destroy_pipeline(p.pipeline, None);
        device.destroy_pipeline_layout(p.layout, None);
        device.destroy_descriptor_set_layout(p.set_layout, None);
    }
}

fn create_pipeline(device: &ash::Device, spec: &KernelSpec<'_>, words: &[u32]) -> Result<Pipeline> {
    let mut bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = spec
        .storage
        .iter()
        .map(|s| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(s.binding)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    bindings.push(
        vk::DescriptorSetLayoutBinding::default()
            .binding(spec.params_binding)
            .descriptor_type(vk::DescriptorType::UNIFORM_BUFFER)
            .descriptor_count(1)
            .stage_flags(vk::ShaderStageFlags::COMPUTE),
    );
    let mut p = Pipeline {
        set_layout: vk::DescriptorSetLayout::null(),
        layout: vk::PipelineLayout::null(),
        pipeline: vk::Pipeline::null(),
    };
    let result = (|| -> Result<()> {
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        // SAFETY: valid create info (distinct binding numbers come from the kernel ABI).
        p.set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }
            .map_err(vk_err("vkCreateDescriptorSetLayout"))?;
        let layouts = [p.set_layout];
        let info = vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts);
        // SAFETY: valid create info.
        p.layout = unsafe { device.create_pipeline_layout(&info, None) }
            .map_err(vk_err("vkCreatePipelineLayout"))?;
        let info = vk::ShaderModuleCreateInfo::default().code(words);
        // SAFETY: `words` is SPIR-V that naga generated from a validated module.
        let module = unsafe { device.create_shader_module(&info, None) }
            .map_err(vk_err("vkCreateShaderModule"))?;
        let entry = std::ffi::CString::new(spec.entry).map_err(|_| {
            let entry = format!("{:?}", spec.entry);
            tensormem_contract::ArgumentError::invalid_value(
                "kernel entry point",
                entry,
                "a name without NUL bytes",
            )
        })?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(&entry);
        let info = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(p.layout);
        // SAFETY: the module and layout are live and match the shader's interface.
        let created =
            unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) };
        // SAFETY: the module is only needed during pipeline creation.
        unsafe { device.destroy_shader_module(module, None) };
        p.pipeline = created
            .map_err(|(_, e)| vk_err("vkCreateComputePipelines")(e))?
            .first()
            .copied()
            .unwrap_or_default();
        Ok(())
    })();
    match result {
        Ok(()) => Ok(p),
        Err(e) => {
            // SAFETY: nothing was used.
            unsafe { destroy_pipeline(device, &p) };
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests;
