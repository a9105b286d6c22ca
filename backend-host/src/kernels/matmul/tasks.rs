//! How a product on a stored weight is cut into tasks for rayon's pool: column ranges of each
//! `b` matrix, split by rows too when there are too few ranges to feed the pool. A task never
//! splits `k`, so every output is summed the same way whatever the cut.

/// Fewest rows a task gets when rows are split across threads.
const MIN_ROWS: usize = 64;

/// One task: columns `j0..j1` of `b` matrix `mat`, for rows `r0..r1` of the rows that matrix
/// multiplies.
#[derive(Clone, Copy, Debug)]
pub(super) struct Task {
    pub mat: usize,
    pub j0: usize,
    pub j1: usize,
    pub r0: usize,
    pub r1: usize,
}

/// Tasks wanted: about four per pool thread in parallel (for load balance), else one.
pub(super) fn wanted(parallel: bool) -> usize {
    if parallel {
        4 * rayon::current_num_threads()
    } else {
        1
    }
}

/// Column ranges of about `want` tasks over `b_mats` matrices of `n` columns, in whole blocks of
/// 4 columns (the dot kernels' block width).
pub(super) fn block_width(n: usize, b_mats: usize, want: usize) -> usize {
    n.div_ceil(want.div_ceil(b_mats)).next_multiple_of(4).min(n)
}

/// Cuts `b_mats` matrices of `n` columns, each multiplied by `rows` rows, into ranges of
/// `width` columns, each range split by rows (never below [`MIN_ROWS`]) until there are about
/// `want` tasks.
pub(super) fn split(b_mats: usize, n: usize, rows: usize, width: usize, want: usize) -> Vec<Task> {
    let panels = b_mats * n.div_ceil(width);
    let row_parts = want.div_ceil(panels).min(rows / MIN_ROWS).max(1);
    let row_step = rows.div_ceil(row_parts);
    let mut tasks = Vec::with_capacity(panels * row_parts);
    for mat in 0..b_mats {
        for j0 in (0..n).step_by(width) {
            for r0 in (0..rows).step_by(row_step) {
                tasks.push(Task {
                    mat,
                    j0,
                    j1: (j0 + width).min(n),
                    r0,
                    r1: (r0 + row_step).min(rows),
                });
            }
        }
    }
    tasks
}
