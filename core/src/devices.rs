//! Several devices under one handle: a [`DeviceSet`] of runtimes, one per device.
//!
//! Each device keeps everything a single-device [`Runtime`] has, of its own: a pool stack with its
//! own [`Budget`](crate::pool::Budget) and statistics, a staging belt (its host-visible upload and
//! readback pools), a weight store. Tensors carry their [`DeviceId`] ([`Tensor::device`]), and
//! nothing moves between devices unless the caller asks:
//!
//! * **placement** — [`DeviceSet::alloc`] on a named device, or [`DeviceSet::alloc_for`] by
//!   affinity: on the device of the op that will consume the tensor (its other operands);
//! * **no silent copies** — an op whose operands live on different devices fails with
//!   [`Error::MixedDevices`] naming the op, both operands and both devices;
//! * **explicit transfers** — [`DeviceSet::copy`] and [`DeviceSet::transfer`] move a tensor with
//!   tickets on both timelines (see [`transfer`] for the paths);
//! * **split models** — [`DeviceSet::compile`] places a graph's ops on the devices and inserts the
//!   transfers at the cut edges (see [`placement`]).
//!
//! Two devices may be two GPUs, two backend instances on one adapter (two lavapipe devices), or
//! a mix (host and Vulkan): the set only asks that each be a [`Backend`].

use std::sync::Arc;

#[cfg(not(target_arch = "wasm32"))]
use crate::backend::completion::complete_now;
use crate::backend::{Backend, Ticket, Waiting};
use crate::ops::{DType, Op};
use crate::pool::{Allocation, AllocationStats, StagingStats};
#[cfg(not(target_arch = "wasm32"))]
use crate::runtime::Element;
use crate::runtime::dispatch::check_same_device;
use crate::runtime::{Runtime, RuntimeConfig, Tensor};
use crate::{Error, Result};

pub mod placement;
#[cfg(any(test, feature = "test-support"))]
pub mod samples;
pub mod transfer;

pub use crate::backend::DeviceId;
pub use placement::{DeviceMemory, PlacedModel, PlacedReport, Placement};
pub use transfer::{TransferPath, TransferStats};

/// One device's memory, as [`DeviceSet::report`] lists it. Sizes in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceReport {
    /// The device.
    pub device: DeviceId,
    /// Backend name ("host", "vulkan", ...).
    pub backend: &'static str,
    /// The driver's name for the device.
    pub device_name: String,
    /// The device's budget limit, if any.
    pub budget: Option<u64>,
    /// Bytes reserved against the budget now (device pools and staging belt together).
    pub reserved: u64,
    /// Highest bytes reserved at once: never above `budget`.
    pub peak_reserved: u64,
    /// The device pool's allocation counters (when statistics are on).
    pub allocations: Option<AllocationStats>,
    /// The device's staging belt.
    pub staging: StagingStats,
}

/// Several devices, one [`Runtime`] each. See the module doc. A cheap handle: `Clone` shares it.
#[derive(Clone)]
pub struct DeviceSet {
    devices: Arc<[Runtime]>,
    stats: Arc<transfer::Counters>,
}

impl DeviceSet {
    /// A set of one device per backend, each with `config` (its budget is per device), numbered
    /// in order from [`DeviceId(0)`](DeviceId).
    ///
    /// # Errors
    /// [`ArgumentError::Zero`](crate::ArgumentError::Zero) for an empty list; [`Runtime::new`]'s
    /// errors.
    pub fn new(backends: Vec<Arc<dyn Backend>>, config: RuntimeConfig) -> Result<Self> {
        Self::with_configs(backends.into_iter().map(|b| (b, config.clone())).collect())
    }

    /// A set of one device per `(backend, config)`: budgets, pools and staging may differ per
    /// device. Each config's [`RuntimeConfig::device_id`] is replaced by the device's index.
    ///
    /// # Errors
    /// As [`DeviceSet::new`].
    pub fn with_configs(devices: Vec<(Arc<dyn Backend>, RuntimeConfig)>) -> Result<Self> {
        if devices.is_empty() {
            return Err(crate::ArgumentError::zero("devices of a device set").into());
        }
        let runtimes = devices
            .into_iter()
            .enumerate()
            .map(|(i, (backend, mut config))| {
                let id = u32::try_from(i).map_err(|_| {
                    crate::ArgumentError::too_many(
                        "devices in a device set",
                        i as u64,
                        u32::MAX.into(),
                    )
                })?;
                config.device_id = DeviceId(id);
                Runtime::new(backend, config)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DeviceSet {
            devices: runtimes.into(),
            stats: Arc::default(),
        })
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether the set is empty (never: a set has at least one device).
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The devices' ids, in order.
    pub fn ids(&self) -> impl Iterator<Item = DeviceId> + '_ {
        (0..self.devices.len() as u32).map(DeviceId)
    }

    /// The runtime of `device`.
    ///
    /// # Errors
    /// [`Error::UnknownDevice`].
    pub fn device(&self, device: DeviceId) -> Result<&Runtime> {
        self.devices
            .get(device.index())
            .ok_or(Error::UnknownDevice {
                device,
                devices: self.devices.len(),
            })
    }

    /// The runtimes, in device order.
    pub fn runtimes(&self) -> &[Runtime] {
        &self.devices
    }

    /// Allocates an uninitialised tensor on `device` (its pool and budget).
    ///
    /// # Errors
    /// [`Error::UnknownDevice`]; as [`Runtime::alloc`].
    pub fn alloc(
        &self,
        device: DeviceId,
        dtype: DType,
        shape: &[usize],
        label: &str,
    ) -> Result<Tensor> {
        self.device(device)?.alloc(dtype, shape, label)
    }

    /// Allocates a tensor by affinity: on the device of `operands`, the other tensors of the op
    /// that will consume it, so the op runs without a transfer.
    ///
    /// # Errors
    /// [`ArgumentError::Invalid`](crate::ArgumentError::Invalid) without operands (no device to
    /// follow), [`Error::MixedDevices`]
    /// when they disagree (the op could not run anyway); as [`Runtime::alloc`].
    pub fn alloc_for(
        &self,
        operands: &[&Tensor],
        dtype: DType,
        shape: &[usize],
        label: &str,
    ) -> Result<Tensor> {
        let first = operands.first().ok_or_else(|| {
            crate::ArgumentError::invalid_value(
                format!("operands of alloc_for '{label}'"),
                "none",
                "at least one, to take the device from (or use DeviceSet::alloc)",
            )
        })?;
        let names: Vec<String> = (0..operands.len()).map(|i| format!("#{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        check_same_device(&format!("alloc_for '{label}'"), &names, operands)?;
        self.alloc(first.device(), dtype, shape, label)
    }

    /// Runs `op` on the device its operands live on ([`Runtime::dispatch`]).
    ///
    /// # Errors
    /// [`Error::MixedDevices`] naming the op and the two operands' devices when they differ
    /// (nothing is enqueued, nothing copied); as [`Runtime::dispatch`].
    pub fn dispatch(&self, op: &Op, inputs: &[&Tensor], outputs: &[&Tensor]) -> Result<Ticket> {
        let tensors: Vec<&Tensor> = inputs.iter().chain(outputs).copied().collect();
        check_same_device(op.name(), &op.operand_names(), &tensors)?;
        let device = tensors.first().map_or(DeviceId(0), |t| t.device());
        self.device(device)?.dispatch(op, inputs, outputs)
    }

    /// Frees a tensor on its device.
    ///
    /// # Errors
    /// As [`Runtime::free`].
    pub fn free(&self, tensor: Tensor) -> Result<()> {
        self.device(tensor.device())?.free(tensor)
    }

    /// Uploads into a tensor on its device. Native only.
    ///
    /// # Errors
    /// As [`Runtime::upload`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn upload<T: Element>(&self, tensor: &Tensor, data: &[T]) -> Result<Ticket> {
        self.device(tensor.device())?.upload(tensor, data)
    }

    /// Downloads a tensor from its device. Native only.
    ///
    /// # Errors
    /// As [`Runtime::download`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download<T: Element>(&self, tensor: &Tensor) -> Result<Vec<T>> {
        self.device(tensor.device())?.download(tensor)
    }

    /// Copies `src` into `dst` (same dtype and shape size), on one device or across two, and
    /// returns the ticket on `dst`'s device after which the bytes are in place (see [`transfer`]
    /// for the paths). Work enqueued on `src` before the call is respected; `src` may be freed or
    /// overwritten once the call returns on the staged path, and after the returned ticket on the
    /// others. Native only; see [`DeviceSet::copy_async`].
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`], [`Error::SizeMismatch`], [`Error::StaleHandle`], backend
    /// errors; on error `dst`'s contents are unspecified (nothing is allocated or leaked).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn copy(&self, src: &Tensor, dst: &Tensor) -> Result<Ticket> {
        complete_now(self.copy_with(Waiting::Blocking, src, dst))
    }

    /// [`DeviceSet::copy`] without blocking.
    ///
    /// # Errors
    /// As [`DeviceSet::copy`].
    pub async fn copy_async(&self, src: &Tensor, dst: &Tensor) -> Result<Ticket> {
        self.copy_with(Waiting::Async, src, dst).await
    }

    async fn copy_with(&self, waiting: Waiting, src: &Tensor, dst: &Tensor) -> Result<Ticket> {
        if src.dtype() != dst.dtype() {
            return Err(Error::DTypeMismatch {
                what: format!("copy from {} to {}", src.device(), dst.device()),
                expected: src.dtype(),
                actual: dst.dtype(),
            });
        }
        if src.size() != dst.size() {
            return Err(Error::SizeMismatch {
                what: format!(
                    "copy of {:?} from {} into {:?} on {}",
                    src.shape(),
                    src.device(),
                    dst.shape(),
                    dst.device()
                ),
                expected: src.size(),
                actual: dst.size(),
            });
        }
        let from = self.device(src.device())?;
        let to = self.device(dst.device())?;
        // Segment by segment: each run of bytes lies in one segment of both tensors (they may be
        // cut differently when the devices' block limits differ).
        let mut last = Ticket::DONE;
        for (s, d, offset, size) in overlaps(src, dst) {
            let (ticket, path) = transfer::copy_range(
                waiting,
                transfer::End::new(from, s.0, offset - s.1),
                transfer::End::new(to, d.0, offset - d.1),
                size,
            )
            .await?;
            self.stats.add(path, size);
            last = last.max(ticket);
        }
        Ok(last)
    }

    /// A copy of `src` on device `to`: allocates it there and copies ([`DeviceSet::copy`]).
    /// Native only; see [`DeviceSet::transfer_async`].
    ///
    /// # Errors
    /// As [`DeviceSet::alloc`] and [`DeviceSet::copy`]; nothing stays allocated on error.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn transfer(&self, src: &Tensor, to: DeviceId, label: &str) -> Result<Tensor> {
        complete_now(self.transfer_with(Waiting::Blocking, src, to, label))
    }

    /// [`DeviceSet::transfer`] without blocking.
    ///
    /// # Errors
    /// As [`DeviceSet::transfer`].
    pub async fn transfer_async(&self, src: &Tensor, to: DeviceId, label: &str) -> Result<Tensor> {
        self.transfer_with(Waiting::Async, src, to, label).await
    }

    async fn transfer_with(
        &self,
        waiting: Waiting,
        src: &Tensor,
        to: DeviceId,
        label: &str,
    ) -> Result<Tensor> {
        let rt = self.device(to)?;
        let dst = rt.alloc(src.dtype(), src.shape(), label)?;
        match self.copy_with(waiting, src, &dst).await {
            Ok(_) => Ok(dst),
            Err(e) => {
                // Part of the copy may be queued: the bytes return after it.
                let after = rt.backend().flush().unwrap_or(Ticket::DONE);
                rt.discard_segments(dst.placement(), after);
                Err(e)
            }
        }
    }

    /// Waits for every device's work and reclaims deferred frees. Native only.
    ///
    /// # Errors
    /// The first device's error.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn synchronize(&self) -> Result<()> {
        self.devices.iter().try_for_each(Runtime::synchronize)
    }

    /// Bytes and time of the copies made through this set so far, per path.
    pub fn transfer_stats(&self) -> TransferStats {
        self.stats.snapshot()
    }

    /// Each device's memory now.
    pub fn report(&self) -> Vec<DeviceReport> {
        self.devices
            .iter()
            .map(|rt| {
                let caps = rt.backend().capabilities();
                DeviceReport {
                    device: rt.device_id(),
                    backend: caps.backend,
                    device_name: caps.device_name.clone(),
                    budget: rt.budget().limit(),
                    reserved: rt.budget().reserved(),
                    peak_reserved: rt.budget().peak_reserved(),
                    allocations: rt.allocation_stats(),
                    staging: rt.staging().stats(),
                }
            })
            .collect()
    }
}

/// A segment of a tensor: its allocation and the offset of its first byte in the tensor.
type SegmentAt = (Allocation, u64);

/// The runs of bytes of two tensors of one size that each lie in one segment of both: `(src
/// segment, dst segment, offset in the tensors, size)`, in order.
fn overlaps(src: &Tensor, dst: &Tensor) -> Vec<(SegmentAt, SegmentAt, u64, u64)> {
    let mut runs = Vec::new();
    let mut d = dst.pieces().peekable();
    for (sa, so, ssize) in src.pieces() {
        let send = so + ssize;
        while let Some(&(da, doff, dsize)) = d.peek() {
            let (start, end) = (so.max(doff), send.min(doff + dsize));
            if start < end {
                runs.push(((sa, so), (da, doff), start, end - start));
            }
            if doff + dsize > send {
                break;
            }
            d.next();
        }
    }
    runs
}

#[cfg(test)]
mod tests;
