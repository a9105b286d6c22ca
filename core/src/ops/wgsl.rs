//! WGSL sources of the standard ops and their binding ABI (used by wgpu, and by Vulkan through naga).
