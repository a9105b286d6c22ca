//! A scratch directory for one test, removed when the test ends, passing or failing: the
//! integration tests used to leave their files in the system's temp directory on every run.

#![allow(
    clippy::unwrap_used,
    reason = "a scratch directory that fails fails its test"
)]

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// An empty directory `tensormem-{label}-{pid}-{n}` under the temp directory, deleted on drop.
/// Each one is new, so tests that run in parallel never share a file. It derefs to its path.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh directory; `label` names the test file it serves.
    pub fn new(label: &str) -> Scratch {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("tensormem-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `contents` to the file `name` in the directory and returns its path.
    #[allow(dead_code, reason = "not every test file writes its inputs")]
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
