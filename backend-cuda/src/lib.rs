//! tensormem backend on CUDA (cudarc).
