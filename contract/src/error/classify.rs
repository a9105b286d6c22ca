//! What a caller can do with an [`Error`]: retry it, give up on the device, or fix its
//! arguments, plus the constructors every module shares. Separate from the enum so the variants'
//! file holds only the variants and their messages.

use super::Error;

impl Error {
    /// Whether the same call can succeed later without the caller changing its arguments.
    ///
    /// True for [`Error::OutOfMemory`] (frees may still be queued behind in-flight work, so
    /// waiting for the device and retrying can succeed) and [`Error::Timeout`] (the work is still
    /// queued and may finish). Everything else is hopeless as asked
    /// (too large, bad alignment, stale handle) or fatal (device lost).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::OutOfMemory(_) | Error::Timeout { .. })
    }

    /// The one cold path for internal bugs: an [`Error::InvariantViolated`] naming the broken
    /// invariant. The validating front marks its device broken when it sees one (wgpu-hal's
    /// `hal_internal_error` is the model), so the bug surfaces once, as an error, never as a panic
    /// or a hang.
    #[cold]
    #[inline(never)]
    pub fn invariant(invariant: &'static str, detail: impl Into<String>) -> Self {
        tensormem_plan::Error::invariant(invariant, detail).into()
    }

    /// Whether this error means the device (or the runtime in front of it) can no longer be used:
    /// [`Error::DeviceLost`] or [`Error::InvariantViolated`].
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::DeviceLost { .. } | Error::InvariantViolated { .. }
        )
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }
}
