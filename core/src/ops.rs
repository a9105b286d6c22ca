//! The standard op set ([`tensormem_contract::ops`]), with the host's reference kernels
//! ([`host`], from `tensormem-host`) and, for tests, the op samples every backend is checked with.

pub use tensormem_contract::ops::*;
pub use tensormem_host::kernels as host;
#[cfg(any(test, feature = "test-support"))]
pub use tensormem_host::samples;
