//! tensormem backend on WebGPU (wgpu).
