//! What a placed model costs on each device, and what crosses between them.

use crate::devices::DeviceId;
use crate::runtime::MemoryReport;

use super::PlacedModel;

/// One device's share of a placed model. Sizes in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceMemory {
    /// The device.
    pub device: DeviceId,
    /// Stages placed on it.
    pub stages: usize,
    /// Nodes placed on it.
    pub nodes: usize,
    /// Weight bytes its stages read (held in its store).
    pub weight_bytes: u64,
    /// Inputs, outputs and tensors arriving from other devices.
    pub io_bytes: u64,
    /// Its planned activation arenas, summed over its stages.
    pub activation_planned_bytes: u64,
    /// The device's budget limit, if any.
    pub budget: Option<u64>,
    /// Highest bytes the device's pools and staging belt reserved at once (its peak; never above
    /// `budget`).
    pub peak_reserved: u64,
}

/// What a placed model costs on each device, and what crosses between them.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedReport {
    /// Per device of the set, in order.
    pub devices: Vec<DeviceMemory>,
    /// `(device, first node, nodes)` of every stage, in run order.
    pub stages: Vec<(DeviceId, usize, usize)>,
    /// Bytes copied between stages per run.
    pub transfer_bytes_per_run: u64,
    /// Completed runs.
    pub runs: u64,
}

impl PlacedModel {
    /// The stages' own memory reports, in run order, with their devices.
    pub fn stage_reports(&self) -> Vec<(DeviceId, MemoryReport)> {
        self.stages
            .iter()
            .map(|s| (s.device, s.model.memory_report()))
            .collect()
    }

    /// Per-device memory and the traffic between devices.
    pub fn report(&self) -> PlacedReport {
        let mut devices: Vec<DeviceMemory> = self
            .set
            .runtimes()
            .iter()
            .map(|rt| DeviceMemory {
                device: rt.device_id(),
                stages: 0,
                nodes: 0,
                weight_bytes: 0,
                io_bytes: 0,
                activation_planned_bytes: 0,
                budget: rt.budget().limit(),
                peak_reserved: rt.budget().peak_reserved(),
            })
            .collect();
        for s in &self.stages {
            let m = s.model.memory_report();
            let d = &mut devices[s.device.index()];
            d.stages += 1;
            d.nodes += s.nodes;
            d.weight_bytes += m.weight_bytes;
            d.io_bytes += m.io_bytes;
            d.activation_planned_bytes += m.activation_planned_bytes;
        }
        PlacedReport {
            devices,
            stages: self
                .stages
                .iter()
                .map(|s| (s.device, s.first_node, s.nodes))
                .collect(),
            transfer_bytes_per_run: self
                .stages
                .iter()
                .flat_map(|s| &s.imports)
                .map(|i| i.size)
                .sum(),
            runs: self.runs,
        }
    }
}
