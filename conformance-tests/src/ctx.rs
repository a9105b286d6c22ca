//! [`Ctx`]: what a case gets, and the one place where a case waits. Each helper calls the blocking
//! form or the awaitable form of the same runtime or backend call, by the context's mode, so one
//! case body checks both forms.

use std::sync::Arc;

use tensormem::graph::TensorId;
use tensormem::{
    Allocation, Backend, BlockId, DeviceId, DeviceSet, Element, HostAccess, Model, Result, Runtime,
    RuntimeConfig, Tensor, Ticket, Waiting,
};

/// What a case gets: a fresh backend of the target, and the completion mode to wait in.
pub struct Ctx {
    /// A fresh backend of the target.
    pub backend: Arc<dyn Backend>,
    /// On a two-device target, the other device (a fresh backend too); `None` on one device.
    pub peer: Option<Arc<dyn Backend>>,
    /// Blocking forms (native only) or awaitable forms.
    pub mode: Waiting,
}

impl Ctx {
    /// The runtime a case runs on: over the target's backend, or on a two-device target, device
    /// 1 of a [`DeviceSet`] whose device 0 is the peer (so every tensor carries a device id other
    /// than the default, and every check of it runs).
    ///
    /// # Errors
    /// As [`Runtime::new`].
    pub fn runtime(&self, config: RuntimeConfig) -> Result<Runtime> {
        match &self.peer {
            None => Runtime::new(self.backend.clone(), config),
            Some(peer) => {
                let set = DeviceSet::with_configs(vec![
                    (peer.clone(), RuntimeConfig::default()),
                    (self.backend.clone(), config),
                ])?;
                set.device(DeviceId(1)).cloned()
            }
        }
    }

    /// The two-device set of a two-device target (the context's backend is device 0, the peer
    /// device 1), each device with `config`.
    ///
    /// # Errors
    /// [`tensormem::Error::Unsupported`] on a one-device target; as [`DeviceSet::new`].
    pub fn device_set(&self, config: RuntimeConfig) -> Result<DeviceSet> {
        let peer = self
            .peer
            .clone()
            .ok_or_else(|| tensormem::Error::Unsupported {
                backend: self.backend.capabilities().backend,
                what: "a two-device case on a one-device target (Ctx::peer)".into(),
            })?;
        DeviceSet::new(vec![self.backend.clone(), peer], config)
    }

    /// `DeviceSet::copy` / `copy_async`.
    pub async fn copy(&self, set: &DeviceSet, src: &Tensor, dst: &Tensor) -> Result<Ticket> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => set.copy(src, dst),
            Waiting::Async => set.copy_async(src, dst).await,
        }
    }

    /// `Runtime::tensor_from` / `tensor_from_async`.
    pub async fn tensor_from<T: Element>(
        &self,
        rt: &Runtime,
        dtype: tensormem::DType,
        shape: &[usize],
        data: &[T],
        label: &str,
    ) -> Result<Tensor> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => rt.tensor_from(dtype, shape, data, label),
            Waiting::Async => rt.tensor_from_async(dtype, shape, data, label).await,
        }
    }

    /// `Runtime::upload` / `upload_async`.
    pub async fn upload<T: Element>(&self, rt: &Runtime, t: &Tensor, data: &[T]) -> Result<Ticket> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => rt.upload(t, data),
            Waiting::Async => rt.upload_async(t, data).await,
        }
    }

    /// `Runtime::download` / `download_async`.
    pub async fn download<T: Element>(&self, rt: &Runtime, t: &Tensor) -> Result<Vec<T>> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => rt.download(t),
            Waiting::Async => rt.download_async(t).await,
        }
    }

    /// `Runtime::write_bytes` / `write_bytes_async`.
    pub async fn write_bytes(
        &self,
        rt: &Runtime,
        alloc: Allocation,
        offset: u64,
        data: &[u8],
    ) -> Result<Ticket> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => rt.write_bytes(alloc, offset, data),
            Waiting::Async => rt.write_bytes_async(alloc, offset, data).await,
        }
    }

    /// `Runtime::read_bytes` / `read_bytes_async`.
    pub async fn read_bytes(
        &self,
        rt: &Runtime,
        alloc: Allocation,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => rt.read_bytes(alloc, offset, out),
            Waiting::Async => rt.read_bytes_async(alloc, offset, out).await,
        }
    }

    /// `Runtime::synchronize` / `synchronize_async`.
    pub async fn synchronize(&self, rt: &Runtime) -> Result<()> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => rt.synchronize(),
            Waiting::Async => rt.synchronize_async().await,
        }
    }

    /// `Backend::wait` / `TicketWait` on the context's backend.
    pub async fn wait(&self, ticket: Ticket) -> Result<()> {
        self.mode.ticket(self.backend.as_ref(), ticket).await
    }

    /// Before `read_mapped` / `write_mapped` of `block`: nothing in blocking mode (the backend
    /// maps synchronously), `HostAccessWait` in async mode.
    pub async fn host_access(&self, block: BlockId, access: HostAccess) -> Result<()> {
        self.mode
            .host_access(self.backend.as_ref(), block, access)
            .await
    }

    /// `Model::set_weight` / `set_weight_async`.
    pub async fn set_weight(&self, m: &mut Model, t: TensorId, data: &[u8]) -> Result<Ticket> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => m.set_weight(t, data),
            Waiting::Async => m.set_weight_async(t, data).await,
        }
    }

    /// `Model::set_input` / `set_input_async`.
    pub async fn set_input(&self, m: &mut Model, t: TensorId, data: &[u8]) -> Result<Ticket> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => m.set_input(t, data),
            Waiting::Async => m.set_input_async(t, data).await,
        }
    }

    /// `Model::run` / `run_async`.
    pub async fn run(&self, m: &mut Model) -> Result<Ticket> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => m.run(),
            Waiting::Async => m.run_async().await,
        }
    }

    /// `Model::read_output` / `read_output_async`.
    pub async fn read_output<T: Element>(&self, m: &Model, t: TensorId) -> Result<Vec<T>> {
        match self.mode {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => m.read_output(t),
            Waiting::Async => m.read_output_async(t).await,
        }
    }
}
