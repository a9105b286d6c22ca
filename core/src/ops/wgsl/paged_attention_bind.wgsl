// Paged attention without a carried state: q, seg, tables, meta, y.
@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> seg: array<u32>;
@group(0) @binding(2) var<storage, read_write> tables: array<u32>;
@group(0) @binding(3) var<storage, read_write> token_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const CARRY_IN: bool = false;

fn carry_at(i: u32) -> f32 {
    return 0.0;
}
