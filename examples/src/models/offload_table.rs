//! The offload benchmark of issue 16, as `minilm --offload-table`: MiniLM at batch 8 and
//! sequences 128 and 512 under device budgets given as percentages of the device bytes it needs
//! without a budget (default 100, 75, 50, 35, 25, 15 and 10%), once per offload score. Each row
//! reports the peak device bytes the model's pool measured; the time of the fastest run as a
//! ratio to the fastest unbudgeted run interleaved with it (same inputs, same warm-up, same load:
//! a second, unbudgeted instance runs between the budgeted runs); the bytes moved each way, the
//! bytes recomputed instead of swapped and the extra work (bytes the re-run ops bind); the
//! stall the two-lane model predicted and the measured one (the host's wait for copy-outs plus,
//! where the backend measures them, the compute lane's device-side waits for the transfer lane;
//! the time ratio is the real overhead); whether the embeddings are bit-identical to the unbudgeted ones; and which score
//! the automatic selection picks at that budget (the lowest predicted stall, then the fewest
//! bytes moved); and the chunks each layer's attention ran in (the fewest whose largest op fits
//! the budget, unless `--attention-chunks` fixes them) and each feed-forward block ran in (likewise,
//! `--ffn-chunks`), "staged" where the chunks' slices go through tensors of their own because that
//! moves fewer bytes. A budget no schedule meets is a row with the error (the op that cannot fit and
//! the bytes it needs). Optionally each budgeted row is measured again with the copies on the
//! compute queue (`--offload-compare-lanes`) or without recompute, swapping only
//! (`--offload-compare-recompute`), in the same run against the same baseline.

use std::time::{Duration, Instant};

use tensormem::Result;
use tensormem::offload::Score;

use super::minilm::{MiniLm, Tiling};
use super::tokenize::{TokenBatch, pad_batch};
use crate::cli::DeviceBudget;

mod render;
pub use render::{to_json, to_markdown};

/// Text the benchmark's sentences are cut from (any text works: only the shape matters).
const TEXT: &str = "Memory is the scarce resource of inference on small devices. A runtime that \
    knows when every tensor is used can move the ones that wait to host memory and bring them \
    back just before they are needed, so that a model larger than the device still runs. The \
    copies travel on their own lane while the kernels compute, and the planner places every \
    tensor, the returning copies included, so that the peak stays within the budget.";

/// One row of the table.
#[derive(Clone, Debug)]
pub struct OffloadRow {
    /// Sentences per batch.
    pub batch: usize,
    /// Tokens per sentence.
    pub seq: usize,
    /// Budget as a percentage of the unbudgeted device bytes (`None`: the unbudgeted baseline).
    pub percent: Option<f64>,
    /// The score tried.
    pub score: Option<Score>,
    /// Chunks each layer's attention ran in ([`AttentionChunks`](super::minilm::AttentionChunks)).
    pub chunks: u32,
    /// Chunks each layer's feed-forward block ran in (rows of tokens).
    pub ffn_chunks: u32,
    /// Whether the chunks' slices were staged through tensors of their own (`Tiling::staged`).
    pub staged: bool,
    /// The budget in bytes (the unbudgeted device bytes for the baseline).
    pub budget: u64,
    /// Peak device bytes measured by the pool.
    pub peak_device_bytes: u64,
    /// Fastest of the timed runs (inputs, run, read back): on a loaded machine other work only
    /// ever adds time, so the fastest run is the least disturbed.
    pub fastest: Duration,
    /// `fastest` over the fastest of the unbudgeted runs interleaved with these.
    pub time_ratio: f64,
    /// Bytes copied to the device per run.
    pub to_device: u64,
    /// Bytes copied to the host per run.
    pub to_host: u64,
    /// Bytes produced again by re-running their ops per run (recomputed instead of swapped).
    pub recomputed: u64,
    /// Extra work per run: the bytes the re-run ops bound.
    pub recompute_work: u64,
    /// Host time waiting for copies in the last run.
    pub stall: Duration,
    /// Stall per run the schedule's two-lane model predicted.
    pub predicted_stall: Duration,
    /// The automatic selection picks this row's score at this budget.
    pub won: bool,
    /// Device memory is host-visible: nothing moved.
    pub unified: bool,
    /// Embeddings bit-identical to the baseline's.
    pub identical: bool,
    /// Why no schedule met the budget.
    pub error: Option<String>,
    /// Whether the copies ran on a concurrent transfer lane.
    pub transfer_lane: bool,
    /// Whether `stall` includes the compute lane's device-side waits, timed by the backend
    /// (`TransferLanes::transfer_stall`); else host waits only.
    pub lane_waits_measured: bool,
    /// Whether swap-ins were device copies out of host-visible memory (else through the host).
    pub direct_swap_in: bool,
    /// The planner's (link, device) rates in bytes per second (zero for the baseline).
    pub rates: (f64, f64),
    /// With `compare.lanes`: the same row with the copies on the compute queue.
    pub lane_off: Option<Again>,
    /// With `compare.recompute`: the same row without recompute (keep or swap only).
    pub swap_only: Option<Again>,
}

/// A budgeted row measured again another way (the copies on the compute queue, or without
/// recompute), in the same run and against the same interleaved baseline.
#[derive(Clone, Debug)]
pub struct Again {
    /// Fastest run over the fastest interleaved unbudgeted run.
    pub time_ratio: f64,
    /// The measured stall of the last run.
    pub stall: Duration,
    /// Bytes copied to the device per run.
    pub to_device: u64,
    /// Bytes copied to the host per run.
    pub to_host: u64,
    /// Embeddings bit-identical to the baseline's.
    pub identical: bool,
    /// Why no schedule met the budget this way.
    pub error: Option<String>,
}

/// Which budgeted rows are measured again another way.
#[derive(Copy, Clone, Debug, Default)]
pub struct Compare {
    /// With the copies on the compute queue.
    pub lanes: bool,
    /// Without recompute.
    pub recompute: bool,
}

/// A batch of `batch` sentences of exactly `seq` tokens cut from `TEXT`.
///
/// # Errors
/// Tokenizer errors.
pub fn token_batch(model: &MiniLm, batch: usize, seq: usize) -> Result<TokenBatch> {
    let words = model.tokenizer().encode(TEXT)?;
    let body: Vec<u32> = words[1..words.len() - 1].to_vec(); // without [CLS] and [SEP]
    let (cls, sep) = (words[0], words[words.len() - 1]);
    let encoded: Vec<Vec<u32>> = (0..batch)
        .map(|b| {
            let mut ids = vec![cls];
            ids.extend(body.iter().cycle().skip(b * 7).take(seq.saturating_sub(2)));
            ids.push(sep);
            ids.truncate(seq);
            ids
        })
        .collect();
    Ok(pad_batch(&encoded))
}

/// Runs the table (module doc) with `runs` timed runs per row after one warm-up. `base` is the
/// unbudgeted model and `model` the one budgeted per row (two instances on one runtime): each
/// row alternates a run of each, so the time ratio compares runs made under the same load.
///
/// # Errors
/// Errors of the baseline; a budgeted row's error is recorded in the row.
pub fn offload_table(
    base: &mut MiniLm,
    model: &mut MiniLm,
    runs: u32,
    shapes: &[(usize, usize)],
    percents: &[f64],
    compare: Compare,
) -> Result<Vec<OffloadRow>> {
    let mut rows = Vec::new();
    base.set_device_budget(None);
    for &(batch, seq) in shapes {
        let tokens = token_batch(model, batch, seq)?;
        let unbudgeted = measure(base, None, &tokens, runs)?;
        rows.push(unbudgeted.row(batch, seq, None, None, &unbudgeted));
        for &p in percents {
            for score in Score::ALL {
                model.set_device_budget(Some(DeviceBudget::Percent(p)));
                model.set_offload_scores(&[score]);
                let mut row = match measure(model, Some(base), &tokens, runs) {
                    Ok(m) => m.row(batch, seq, Some(p), Some(score), &unbudgeted),
                    Err(e) => OffloadRow {
                        error: Some(e.to_string()),
                        identical: false,
                        ..unbudgeted.row(batch, seq, Some(p), Some(score), &unbudgeted)
                    },
                };
                if row.error.is_none() {
                    let mut again = |model: &mut MiniLm, set: fn(&mut MiniLm, bool)| {
                        set(model, false);
                        let m = measure(model, Some(&mut *base), &tokens, runs);
                        set(model, true);
                        m.map(|m| m.again(&unbudgeted))
                    };
                    if compare.lanes {
                        row.lane_off = Some(again(model, MiniLm::set_transfer_lane)?);
                    }
                    if compare.recompute {
                        let swap_only = again(model, MiniLm::set_recompute);
                        row.swap_only = Some(swap_only.unwrap_or_else(|e| Again {
                            time_ratio: 0.0,
                            stall: Duration::ZERO,
                            to_device: 0,
                            to_host: 0,
                            identical: false,
                            error: Some(e.to_string()),
                        }));
                    }
                }
                rows.push(row);
            }
            mark_winner(&mut rows);
        }
        model.set_device_budget(None);
        model.set_offload_scores(&Score::ALL);
    }
    Ok(rows)
}

/// Marks, among the rows of the last budget (one per score), the one the automatic selection
/// picks: the lowest predicted stall, then the fewest bytes moved, then the earlier score.
fn mark_winner(rows: &mut [OffloadRow]) {
    let len = rows.len();
    let tail = &mut rows[len - Score::ALL.len().min(len)..];
    let best = tail
        .iter()
        .enumerate()
        .filter(|(_, r)| r.error.is_none())
        .min_by_key(|(i, r)| (r.predicted_stall, r.to_device + r.to_host, *i))
        .map(|(i, _)| i);
    if let Some(i) = best {
        tail[i].won = true;
    }
}

/// What one configuration measured.
struct Measured {
    bits: Vec<u32>,
    fastest: Duration,
    /// Fastest of the unbudgeted runs interleaved with these (`fastest` for the baseline itself).
    base_fastest: Duration,
    budget: u64,
    peak: u64,
    to_device: u64,
    to_host: u64,
    recomputed: u64,
    recompute_work: u64,
    stall: Duration,
    predicted_stall: Duration,
    unified: bool,
    transfer_lane: bool,
    lane_waits_measured: bool,
    direct_swap_in: bool,
    tiling: Tiling,
    rates: (f64, f64),
}

/// One inference (inputs, run, read back), timed.
fn infer(model: &mut MiniLm, tokens: &TokenBatch) -> Result<Duration> {
    let start = Instant::now();
    model.set_tokens(tokens)?;
    model.run(tokens.batch, tokens.seq)?;
    model.read_embeddings(tokens.batch, tokens.seq)?;
    Ok(start.elapsed())
}

/// Measures `model` over `runs` runs after a warm-up, alternating with a run of `base` when given.
fn measure(
    model: &mut MiniLm,
    mut base: Option<&mut MiniLm>,
    tokens: &TokenBatch,
    runs: u32,
) -> Result<Measured> {
    let (batch, seq) = (tokens.batch, tokens.seq);
    infer(model, tokens)?;
    if let Some(b) = base.as_deref_mut() {
        infer(b, tokens)?;
    }
    let (mut fastest, mut base_fastest) = (Duration::MAX, Duration::MAX);
    for _ in 0..runs.max(1) {
        if let Some(b) = base.as_deref_mut() {
            base_fastest = base_fastest.min(infer(b, tokens)?);
        }
        fastest = fastest.min(infer(model, tokens)?);
    }
    if base.is_none() {
        base_fastest = fastest;
    }
    let bits = model
        .read_embeddings(batch, seq)?
        .iter()
        .flatten()
        .map(|v| v.to_bits())
        .collect();
    let report = model
        .cached_model(batch, seq)
        .map(tensormem::Model::memory_report)
        .unwrap_or_default();
    let runs_done = report.runs.max(1);
    let (budget, to_device, to_host, stall, unified) = match &report.offload {
        Some(o) => (
            o.budget,
            o.bytes_to_device / runs_done,
            o.bytes_to_host / runs_done,
            o.last_stall,
            o.unified,
        ),
        None => (
            report.unbudgeted_device_bytes(),
            0,
            0,
            Duration::ZERO,
            false,
        ),
    };
    let (recomputed, recompute_work) = report.offload.as_ref().map_or((0, 0), |o| {
        (o.bytes_recomputed / runs_done, o.recompute_work / runs_done)
    });
    let transfer_lane = report.offload.as_ref().is_some_and(|o| o.transfer_lane);
    let direct_swap_in = report.offload.as_ref().is_some_and(|o| o.direct_swap_in);
    let lane_waits_measured = report
        .offload
        .as_ref()
        .is_some_and(|o| o.lane_waits_measured);
    let predicted_stall = report
        .offload
        .as_ref()
        .and_then(|o| o.outcomes.iter().find(|s| s.score.name() == o.score))
        .map_or(Duration::ZERO, |s| s.predicted_stall);
    Ok(Measured {
        tiling: model.tiling(batch, seq).unwrap_or(Tiling::NONE),
        rates: report
            .offload
            .as_ref()
            .map_or((0.0, 0.0), |o| (o.link_bandwidth, o.device_rate)),
        bits,
        fastest,
        base_fastest,
        budget,
        peak: report.peak_device_bytes,
        to_device,
        to_host,
        recomputed,
        recompute_work,
        stall,
        predicted_stall,
        unified,
        transfer_lane,
        lane_waits_measured,
        direct_swap_in,
    })
}

impl Measured {
    fn row(
        &self,
        batch: usize,
        seq: usize,
        percent: Option<f64>,
        score: Option<Score>,
        base: &Measured,
    ) -> OffloadRow {
        OffloadRow {
            batch,
            seq,
            percent,
            score,
            chunks: self.tiling.attention,
            ffn_chunks: self.tiling.ffn,
            staged: self.tiling.staged,
            budget: self.budget,
            peak_device_bytes: self.peak,
            fastest: self.fastest,
            time_ratio: self.fastest.as_secs_f64() / self.base_fastest.as_secs_f64().max(1e-12),
            to_device: self.to_device,
            to_host: self.to_host,
            recomputed: self.recomputed,
            recompute_work: self.recompute_work,
            stall: self.stall,
            predicted_stall: self.predicted_stall,
            won: false,
            unified: self.unified,
            identical: self.bits == base.bits,
            error: None,
            transfer_lane: self.transfer_lane,
            lane_waits_measured: self.lane_waits_measured,
            direct_swap_in: self.direct_swap_in,
            rates: self.rates,
            lane_off: None,
            swap_only: None,
        }
    }

    /// This measurement as another way of measuring a row whose baseline is `base`.
    fn again(&self, base: &Measured) -> Again {
        Again {
            time_ratio: self.fastest.as_secs_f64() / self.base_fastest.as_secs_f64().max(1e-12),
            stall: self.stall,
            to_device: self.to_device,
            to_host: self.to_host,
            identical: self.bits == base.bits,
            error: None,
        }
    }
}
