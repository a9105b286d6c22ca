//! Pure offset sub-allocators over `u64` ranges (TLSF, linear, ring). No memory is touched.
