//! # tensormem-contract
//!
//! What every tensormem backend implements and every layer above it speaks: the [`Backend`]
//! trait with its optional capability traits ([`backend`]), the standard op set defined once as
//! data ([`ops`], with the WGSL kernels and the quantized weight formats), and the one [`Error`]
//! type ([`error`]). The runtime (`tensormem`) and every backend crate (`tensormem-host`,
//! `tensormem-cuda`, `tensormem-vulkan`, `tensormem-wgpu`) depend on this crate; it depends on
//! nothing of theirs, so a backend never reaches into the runtime.
//!
//! `tensormem` re-exports everything here at the same paths (`tensormem::backend`,
//! `tensormem::ops`, `tensormem::Error`); users import from there.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod error;
pub mod ops;
mod tensor_kind;
#[doc(hidden)]
pub mod time;

pub use backend::HostPlacement;
pub use backend::{
    Backend, BackendAdaptor, BlockDesc, BlockEntry, BlockId, BlockRange, BlockTable, Capabilities,
    DeviceId, DeviceType, Extensions, Growable, HostAccess, HostAccessWait, InPlaceGrowth, Managed,
    ManagedMemory, MappedAccess, MemoryKind, Peer, PeerCopy, PeerPath, PeerRanges, Residence,
    Ticket, TicketWait, TicketWakers, TransferLane, TransferLanes, TransferTicket, TransferWait,
    Waiting,
};
pub use error::{ArgumentError, Error, GraphError, GrowthError, KvError, OomReport, Result};
pub use ops::{DType, KvDType, KvLayout, Op, WeightFormat};
pub use tensor_kind::TensorKind;
