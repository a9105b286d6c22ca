//! The tiling search's propagation: the necessary conditions checked over the whole grid before
//! each branch (a free run for every unplaced buffer, an exact subset sum for every free range).

use super::Tiling;
use super::bits::{next_bit, shift_or};

impl Tiling<'_> {
    /// Necessary conditions over the whole grid. Each unplaced buffer lies in a free run of the
    /// union of its sections' rows at least its size long (none: dead). In each section every
    /// free range is exactly tiled by unplaced buffers live there, each of which lies in a range
    /// that holds one of its runs: the range's length must be a sum of the sizes of those.
    pub(super) fn propagate(&mut self) -> bool {
        let p = self.p;
        let words = self.words;
        let mut union = std::mem::take(&mut self.union);
        let mut runs = std::mem::take(&mut self.runs);
        let mut run_start = std::mem::take(&mut self.run_start);
        runs.clear();
        run_start.clear();
        let mut ok = true;
        for &y in &self.members {
            run_start.push(runs.len());
            let yi = y as usize;
            if self.placed[yi] {
                continue;
            }
            union.clear();
            union.resize(words, 0);
            for s in p.first[yi]..=p.last[yi] {
                let s = (s - self.first) as usize;
                for (u, &w) in union.iter_mut().zip(&self.grid[s * words..(s + 1) * words]) {
                    *u |= w;
                }
            }
            let need = (p.size[yi] / self.unit) as usize;
            let before = runs.len();
            let mut at = 0;
            while let Some(a) = next_bit(&union, at, false) {
                let b = next_bit(&union, a, true).unwrap_or(words * 64);
                if b - a >= need {
                    runs.push((a, b));
                }
                at = b;
            }
            if runs.len() == before {
                ok = false;
                break;
            }
        }
        run_start.push(runs.len());
        if ok {
            ok = self.ranges_fill(&runs, &run_start);
        }
        self.union = union;
        self.runs = runs;
        self.run_start = run_start;
        ok
    }

    /// The per-range subset sums of [`Self::propagate`], given each member's runs.
    fn ranges_fill(&mut self, runs: &[(usize, usize)], run_start: &[usize]) -> bool {
        let p = self.p;
        let mut sums = std::mem::take(&mut self.sums);
        let mut ranges = std::mem::take(&mut self.ranges);
        let mut ok = true;
        'sections: for s in 0..self.sections {
            ranges.clear();
            let mut at = 0;
            while let Some((a, b)) = self.free_range(s, at) {
                ranges.push((a, b, sums.len()));
                at = b;
            }
            if ranges.is_empty() {
                continue;
            }
            sums.clear();
            for r in ranges.iter_mut() {
                r.2 = sums.len();
                sums.push(1);
                sums.resize(sums.len() + (r.1 - r.0) / 64, 0);
            }
            let section = s + self.first as usize;
            for &y in p.section_members(section) {
                let yi = y as usize;
                if self.placed[yi] {
                    continue;
                }
                let k = self.local[yi] as usize;
                let units = (p.size[yi] / self.unit) as usize;
                let mut last_range = usize::MAX;
                for &(a, _) in &runs[run_start[k]..run_start[k + 1]] {
                    let r = ranges.partition_point(|r| r.1 <= a);
                    if r == last_range || r >= ranges.len() {
                        continue;
                    }
                    last_range = r;
                    let end = ranges.get(r + 1).map_or(sums.len(), |n| n.2);
                    shift_or(&mut sums[ranges[r].2..end], units);
                }
            }
            for (r, range) in ranges.iter().enumerate() {
                let v = range.1 - range.0;
                let end = ranges.get(r + 1).map_or(sums.len(), |n| n.2);
                let bits = &sums[range.2..end];
                if bits[v / 64] >> (v % 64) & 1 == 0 {
                    ok = false;
                    break 'sections;
                }
            }
        }
        self.sums = sums;
        self.ranges = ranges;
        ok
    }
}
