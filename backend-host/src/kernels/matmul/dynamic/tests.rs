//! The int8-dynamic product against the format's definition, evaluated element by element
//! (`ops::quant`'s doc): bit for bit, on every kernel, layout, group size and thread split.

use proptest::prelude::*;

use super::quantize::{quantize_row, quantize_row_lanes};
use super::{Tile, matmul_dynamic, portable};
use crate::kernels::matmul::Shape;
use crate::ops::quant::Int8Parts;
use crate::samples::Rng;

/// One product's operands: `a` in [-2, 2), any int8 byte for `w` (−128 included), positive
/// scales, a bias.
struct Case {
    s: Shape,
    a: Vec<f32>,
    w: Vec<i8>,
    scales: Vec<f32>,
    bias: Vec<f32>,
    group: usize,
    groups: usize,
    alpha: f32,
}

impl Case {
    fn new(s: Shape, group: usize, seed: u64) -> Case {
        let mut rng = Rng::new(seed);
        let mut next = move || rng.next_u64() >> 16;
        let (batch, m, n, k) = (s.batch, s.m, s.n, s.k);
        let b_mats = if s.broadcast_b { 1 } else { batch };
        let (group, groups) = if group == 0 || group >= k {
            (k, 1)
        } else {
            (group, k.div_ceil(group))
        };
        let mut float = move |scale: f32| (next() % (1 << 24)) as f32 / (1 << 22) as f32 * scale;
        let a = (0..batch * m * k).map(|_| float(1.0) - 2.0).collect();
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut next = move || rng.next_u64();
        let w = (0..b_mats * n * k).map(|_| next() as u8 as i8).collect();
        let scales = (0..b_mats * n * groups)
            .map(|_| float(0.01) + 0.001)
            .collect();
        let bias = (0..n).map(|_| float(1.0) - 2.0).collect();
        Case {
            s,
            a,
            w,
            scales,
            bias,
            group,
            groups,
            alpha: 0.75,
        }
    }

    fn parts(&self) -> Int8Parts<'_> {
        Int8Parts {
            q: &self.w,
            scales: &self.scales,
            group: self.group,
            groups: self.groups,
        }
    }

    /// The host kernels' result.
    fn host(&self) -> Vec<f32> {
        let s = &self.s;
        let mut c = vec![0f32; s.batch * s.m * s.n];
        matmul_dynamic(
            s,
            &self.a,
            &self.parts(),
            Some(&self.bias),
            self.alpha,
            &mut c,
        )
        .unwrap();
        c
    }

    /// The definition, element by element.
    fn definition(&self) -> Vec<f32> {
        let s = &self.s;
        let (m, n, k) = (s.m, s.n, s.k);
        let mut c = Vec::with_capacity(s.batch * m * n);
        for mat in 0..s.batch {
            let b_mat = if s.broadcast_b { 0 } else { mat };
            for i in 0..m {
                let a_at = |p: usize| match s.trans_a {
                    true => self.a[mat * m * k + p * m + i],
                    false => self.a[mat * m * k + i * k + p],
                };
                let lo = (0..k).map(a_at).fold(0f32, f32::min);
                let hi = (0..k).map(a_at).fold(0f32, f32::max);
                let span = hi - lo;
                let inv = if span > 0.0 { 255.0 / span } else { 0.0 };
                let z = (-lo * inv).round_ties_even() as i32;
                let u = |p: usize| ((a_at(p) * inv).round_ties_even() as i32 + z).clamp(0, 255);
                for j in 0..n {
                    let w_at = |p: usize| match s.trans_b {
                        true => self.w[(b_mat * n + j) * k + p],
                        false => self.w[b_mat * k * n + p * n + j],
                    };
                    let mut acc = 0f32;
                    for g in 0..self.groups {
                        let part = g * self.group..((g + 1) * self.group).min(k);
                        let d: i32 = part.map(|p| (u(p) - z) * i32::from(w_at(p))).sum();
                        acc += self.scales[(b_mat * n + j) * self.groups + g] * d as f32;
                    }
                    c.push(self.alpha * ((span / 255.0) * acc) + self.bias[j]);
                }
            }
        }
        c
    }
}

fn shape(batch: usize, m: usize, n: usize, k: usize, flags: (bool, bool, bool)) -> Shape {
    let (trans_a, trans_b, broadcast_b) = flags;
    Shape {
        batch,
        m,
        n,
        k,
        trans_a,
        trans_b,
        broadcast_b,
    }
}

fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{what}: element {e}: {g} against {w}"
        );
    }
}

#[test]
fn products_equal_the_definition_bit_for_bit() {
    let linear = (false, true, true);
    for (s, group) in [
        // A linear layer: per channel, whole steps and a tail; blocks and edges on both sides.
        (shape(1, 12, 384, 384, linear), 0),
        (shape(1, 11, 30, 70, linear), 0),
        (shape(2, 37, 41, 100, linear), 0),
        // Decode steps: fewer than three rows, 1 × 8 blocks and an edge.
        (shape(1, 1, 19, 96, linear), 0),
        (shape(1, 2, 16, 33, linear), 0),
        // Groups of whole steps, a partial last group; groups that are not whole steps.
        (shape(1, 7, 9, 160, linear), 64),
        (shape(1, 7, 9, 150, linear), 32),
        (shape(1, 5, 6, 31, linear), 8),
        // Other layouts: transposed `a`, `[k, n]` weights, a weight per matrix.
        (shape(3, 6, 5, 13, (true, true, true)), 4),
        (shape(2, 9, 13, 31, (false, false, false)), 0),
        (shape(2, 33, 35, 70, (true, false, false)), 32),
        // Large enough for the parallel split (rows and columns).
        (shape(1, 200, 72, 256, linear), 0),
        (shape(4, 64, 40, 128, (false, true, false)), 0),
    ] {
        let what = format!(
            "{}x{}x{}x{} {:?} group {group}",
            s.batch,
            s.m,
            s.n,
            s.k,
            (s.trans_a, s.trans_b, s.broadcast_b)
        );
        let case = Case::new(s, group, 7);
        assert_bits(&case.host(), &case.definition(), &what);
    }
}

/// A kernel of the tile product (`run_tile`'s contract).
type Kernel = unsafe fn(&Tile<'_>, *mut f32, usize);

/// The kernels this CPU runs for groups of `group` bytes (one group: `group == k`), by name.
fn kernels(group: usize, groups: usize) -> Vec<(&'static str, Kernel)> {
    let mut out: Vec<(&'static str, Kernel)> = vec![("portable", portable)];
    #[cfg(target_arch = "x86_64")]
    if super::vnni::available() {
        let fill = |step: usize| groups == 1 || group.is_multiple_of(step);
        if fill(32) {
            out.push(("vnni 256-bit", super::vnni::run_256));
        }
        if fill(64) {
            out.push(("vnni 512-bit", super::vnni::run_512));
        }
    }
    out
}

/// Every kernel this CPU has gives the definition's bits: one group with a partial last
/// step, groups of whole 64- and 32-byte steps with a short last group, decode rows.
#[test]
fn every_kernel_gives_the_same_bits() {
    for (m, k, group) in [(14, 100, 0), (14, 200, 64), (7, 160, 32), (2, 448, 0)] {
        let case = Case::new(shape(1, m, 22, k, (false, true, true)), group, 3);
        let want = case.definition();
        let (n, group, groups) = (case.s.n, case.group, case.groups);
        let ld = k.next_multiple_of(super::STEP);
        let (mut u, mut scale, mut zero) = (vec![0u8; m * ld], vec![0f32; m], vec![0i32; m]);
        for i in 0..m {
            (scale[i], zero[i]) = quantize_row(&case.a[i * k..][..k], &mut u[i * ld..][..k]);
        }
        let wsums: Vec<i32> = case
            .w
            .chunks_exact(k)
            .flat_map(|w| {
                w.chunks(group)
                    .map(|g| g.iter().map(|&v| i32::from(v)).sum())
            })
            .collect();
        let tile = Tile {
            u: &u,
            ld,
            scale: &scale,
            zero: &zero,
            w: &case.w,
            wsums: &wsums,
            wscales: &case.scales,
            rows: m,
            cols: n,
            k,
            group,
            groups,
            alpha: case.alpha,
            bias: Some(&case.bias),
        };
        for (name, kernel) in kernels(group, groups) {
            let mut got = vec![0f32; m * n];
            // SAFETY: `got` holds `rows · cols` elements at row stride `n`, owned here; `kernels`
            // lists only what this CPU runs for these groups.
            unsafe { kernel(&tile, got.as_mut_ptr(), n) };
            assert_bits(&got, &want, &format!("{name} {m}x{n}x{k}/{group}"));
        }
    }
}

#[test]
fn rounding_is_to_nearest_even_and_zero_rows_give_the_bias() {
    // The range [-1, 254] makes inv 1 and the zero point 1: u is the value rounded, plus 1.
    let row = [254.0, 2.5, -1.0, 3.5, 0.49, 125.5];
    let mut u = [0u8; 6];
    let (scale, zero) = quantize_row(&row, &mut u);
    assert_eq!((scale, zero), (1.0, 1));
    assert_eq!(u, [255, 3, 0, 5, 1, 127]);
    // A row of one sign still holds 0 exactly: [0, 2] maps 0 to 0.
    let (scale, zero) = quantize_row(&[2.0, 1.0, 0.0], &mut u[..3]);
    assert_eq!((scale, zero, &u[..3]), (2.0 / 255.0, 0, &[255, 128, 0][..]));
    let mut case = Case::new(shape(1, 4, 8, 40, (false, true, true)), 0, 5);
    case.a[40..80].fill(0.0);
    let c = case.host();
    assert_bits(&c[8..16], &case.bias, "a zero row");
}

#[test]
fn a_non_finite_value_makes_its_row_nan_and_only_its_row() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut case = Case::new(shape(1, 5, 9, 64, (false, true, true)), 0, 11);
        case.a[2 * 64 + 17] = bad;
        let c = case.host();
        let clean = {
            let mut fine = Case::new(shape(1, 5, 9, 64, (false, true, true)), 0, 11);
            fine.a[2 * 64..3 * 64].fill(0.0);
            fine.host()
        };
        for (e, (&got, &want)) in c.iter().zip(&clean).enumerate() {
            if e / 9 == 2 {
                assert!(got.is_nan(), "{bad}: element {e} is {got}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{bad}: element {e}");
            }
        }
    }
}

#[test]
fn products_stay_near_the_float_product() {
    // Rounding `A` to 8 bits moves each output by at most half a step of `A` per product:
    // |Δc| ≤ alpha · ((hi − lo) / 510) · Σ|w·scale| (plus f32 rounding).
    let case = Case::new(shape(1, 9, 17, 300, (false, true, true)), 0, 13);
    let got = case.host();
    let (m, n, k) = (case.s.m, case.s.n, case.s.k);
    for i in 0..m {
        let a = &case.a[i * k..][..k];
        let lo = a.iter().fold(0f32, |t, &v| t.min(v));
        let hi = a.iter().fold(0f32, |t, &v| t.max(v));
        for j in 0..n {
            let w = &case.w[j * k..][..k];
            let scale = case.scales[j];
            let exact: f64 = a
                .iter()
                .zip(w)
                .map(|(&a, &w)| f64::from(a) * f64::from(w))
                .sum();
            let exact = f64::from(case.alpha) * exact * f64::from(scale) + f64::from(case.bias[j]);
            let l1: f64 = w
                .iter()
                .map(|&w| f64::from(w).abs() * f64::from(scale))
                .sum();
            let bound = f64::from(case.alpha) * f64::from(hi - lo) / 510.0 * l1 * 1.01 + 1e-4;
            let diff = (f64::from(got[i * n + j]) - exact).abs();
            assert!(diff <= bound, "({i}, {j}): {diff} above {bound}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_shapes_equal_the_definition(
        batch in 1usize..4, m in 1usize..40, n in 1usize..40, k in 1usize..200,
        trans_a: bool, trans_b: bool, broadcast_b: bool, group in 0usize..80, seed: u64,
    ) {
        let case = Case::new(shape(batch, m, n, k, (trans_a, trans_b, broadcast_b)), group, seed);
        let (got, want) = (case.host(), case.definition());
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!(g.to_bits(), w.to_bits());
        }
    }
}

/// The dispatched row quantiser (explicit min/max vectors on x86-64) gives the portable loops'
/// scale, zero point and bytes, bit for bit: signed zeros, a NaN or an infinity anywhere (the
/// vector body or the tail), all-equal rows, lengths around the 8-lane step.
#[test]
fn the_row_quantiser_matches_its_portable_loops() {
    let mut rng = Rng::new(11);
    for len in [1usize, 7, 8, 9, 16, 31, 384] {
        let base: Vec<f32> = (0..len)
            .map(|_| (rng.next_u64() % 2001) as f32 / 500.0 - 2.0)
            .collect();
        let mut rows = vec![base.clone(), vec![-0.0; len], vec![0.75; len]];
        for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0] {
            for at in [0, len / 2, len - 1] {
                let mut row = base.clone();
                row[at] = special;
                rows.push(row);
            }
        }
        for row in rows {
            let (mut got, mut want) = (vec![0u8; len], vec![0u8; len]);
            let (gs, gz) = quantize_row(&row, &mut got);
            let (ws, wz) = quantize_row_lanes(&row, &mut want);
            assert_eq!(
                (gs.to_bits(), gz, &got),
                (ws.to_bits(), wz, &want),
                "{row:?}"
            );
        }
    }
}
