//! The targets the suite runs on. Each backend adds its configurations here: a few lines each.

use std::sync::Arc;

use tensormem::{Backend, HostBackend, HostConfig, Result};

use crate::Target;

fn host() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HostBackend::new(HostConfig::default())?))
}

fn host_staging() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HostBackend::new(HostConfig {
        force_staging: true,
        ..HostConfig::default()
    })?))
}

/// Every target, in report order.
pub fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "host",
            backend: "host",
            create: host,
            after_case: None,
        },
        Target {
            name: "host-staging",
            backend: "host",
            create: host_staging,
            after_case: None,
        },
    ]
}
