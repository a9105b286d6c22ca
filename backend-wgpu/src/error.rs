//! Native wgpu failures mapped into [`tensormem_contract::Error`], and the device's health.
//!
//! wgpu reports most failures out of band: a lost device through the device-lost callback, and
//! validation or out-of-memory errors through error scopes or, when no scope catches them, the
//! uncaptured-error handler, whose default **panics**. [`Health`] installs both callbacks so that
//! nothing panics: a lost device becomes [`Error::DeviceLost`] on every later call, and an
//! uncaptured error becomes [`Error::Backend`] on the next call that checks health.

use std::sync::{Arc, Mutex, MutexGuard};

use tensormem_contract::{Error, TicketWakers};

/// Backend name used in every error.
pub(crate) const BACKEND: &str = "wgpu";

/// What the device callbacks observed. Shared with the callbacks, hence `Arc` + interior locks.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// The device-lost message, once the device is lost. Never cleared: a lost device stays lost.
    lost: Mutex<Option<String>>,
    /// Uncaptured errors not yet reported, oldest first (at most [`Health::MAX_PENDING`]).
    uncaptured: Mutex<Vec<String>>,
}

/// Locks a mutex, ignoring poisoning: every critical section here leaves the data consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Health {
    /// Uncaptured errors kept for the next report; later ones are counted, not stored.
    const MAX_PENDING: usize = 8;

    /// Installs the device-lost callback and the uncaptured-error handler on `device`.
    ///
    /// Both replace whatever the application installed before (wgpu keeps one of each). A lost
    /// device wakes every task in `wakers`: their tickets may never complete, and each must see
    /// the error.
    pub(crate) fn install(device: &wgpu::Device, wakers: Arc<Mutex<TicketWakers>>) -> Arc<Health> {
        let health = Arc::new(Health::default());
        let on_lost = Arc::clone(&health);
        device.set_device_lost_callback(move |reason, message| {
            {
                let mut lost = lock(&on_lost.lost);
                if lost.is_none() {
                    *lost = Some(format!("{reason:?}: {message}"));
                }
            }
            let woken = lock(&wakers).take_all();
            woken.into_iter().for_each(std::task::Waker::wake);
        });
        let on_error = Arc::clone(&health);
        device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
            let mut pending = lock(&on_error.uncaptured);
            if pending.len() < Self::MAX_PENDING {
                pending.push(error.to_string());
            }
        }));
        health
    }

    /// `Ok` while the device is usable.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] once the device is lost; [`Error::Backend`] (api "uncaptured error")
    /// carrying the uncaptured errors seen since the last check, which are then cleared.
    pub(crate) fn check(&self) -> tensormem_contract::Result<()> {
        if let Some(detail) = lock(&self.lost).clone() {
            return Err(Error::DeviceLost {
                backend: BACKEND,
                detail,
            });
        }
        let mut pending = lock(&self.uncaptured);
        if !pending.is_empty() {
            let message = pending.join("; ");
            pending.clear();
            return Err(Error::Backend {
                backend: BACKEND,
                api: "uncaptured error",
                code: 0,
                message,
            });
        }
        Ok(())
    }

    /// Whether the device is lost.
    pub(crate) fn is_lost(&self) -> bool {
        lock(&self.lost).is_some()
    }
}

/// Maps an error caught by an error scope around `api` for a request of `size` bytes.
///
/// `OutOfMemory` becomes [`Error::OutOfMemory`] (retryable: frees may be pending);
/// validation and internal errors become [`Error::Backend`] with wgpu's message. Native only: a
/// browser's scopes resolve as promises a synchronous call cannot await.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn map_scope_error(error: wgpu::Error, api: &'static str, size: u64) -> Error {
    match error {
        wgpu::Error::OutOfMemory { .. } => {
            Error::OutOfMemory(Box::new(tensormem_contract::OomReport {
                pool: "wgpu device".into(),
                requested: size,
                ..tensormem_contract::OomReport::default()
            }))
        }
        other => Error::Backend {
            backend: BACKEND,
            api,
            code: 0,
            message: other.to_string(),
        },
    }
}

/// Blocks in `Device::poll` until submission `index` (`None`: every submission) has finished,
/// for at most `timeout` (`None`: no limit); a timeout is `Error::Timeout` on `what`.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn poll_wait(
    device: &wgpu::Device,
    index: Option<wgpu::SubmissionIndex>,
    timeout: Option<std::time::Duration>,
    what: impl FnOnce() -> String,
) -> tensormem_contract::Result<()> {
    device
        .poll(wgpu::PollType::Wait {
            submission_index: index,
            timeout,
        })
        .map(drop)
        .map_err(|e| match e {
            wgpu::PollError::Timeout => Error::Timeout {
                backend: BACKEND,
                what: what(),
                timeout: timeout.unwrap_or(std::time::Duration::MAX),
            },
            other => map_poll_error(other),
        })
}

/// Maps a failed `Device::poll`: a submission index wgpu does not know, or a timeout.
pub(crate) fn map_poll_error(error: wgpu::PollError) -> Error {
    Error::Backend {
        backend: BACKEND,
        api: "Device::poll",
        code: 0,
        message: error.to_string(),
    }
}

/// Maps a failed buffer mapping (`map_async` callback error or `get_mapped_range` error).
pub(crate) fn map_mapping_error(api: &'static str, message: String) -> Error {
    Error::Backend {
        backend: BACKEND,
        api,
        code: 0,
        message,
    }
}
