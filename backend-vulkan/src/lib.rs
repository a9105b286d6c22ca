//! tensormem backend on Vulkan (ash + gpu-allocator).
