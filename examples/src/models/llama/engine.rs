//! Continuous batching over the paged KV cache: requests join and leave the running batch at
//! every step.
//!
//! Each step gathers one chunk per running request, within a token budget
//! ([`EngineConfig::step_tokens`]): a decode request contributes its one pending token, a request
//! in prefill (or recomputing after a preemption) the next piece of its tokens (chunked prefill),
//! and waiting requests are admitted while the budget and the KV cache allow — the cache taking
//! any prompt prefix it already holds (those tokens are not computed again). Slots are reserved
//! before the forward pass; a reservation that finds the cache full preempts the most recently
//! admitted other request (swap or recompute, as the cache is configured), which leaves the
//! step and resumes, first in line, when blocks are free again. A new request is admitted only
//! while the cache keeps one free block per running request beyond its prompt, so admissions do
//! not preempt running requests. After the forward pass each chunk that reached its request's
//! last token samples the next one; a stop token, the token limit or the context length ends the
//! request and frees its blocks.

use std::collections::VecDeque;

use web_time::Instant;

use tensormem::kv::{KvCache, Preemption, SeqId};
use tensormem::{ArgumentError, Error, Result};

use super::forward::{Chunk, Decoder};
use super::requests::{EngineConfig, EngineStats, Event, Finish, Request};
use super::sampler::Sampler;

struct Live {
    id: usize,
    /// Prompt then generated tokens.
    tokens: Vec<u32>,
    prompt_len: usize,
    max_new: usize,
    stop: Vec<u32>,
    sampler: Sampler,
    seq: Option<SeqId>,
    /// Leading tokens whose keys and values are in the cache.
    computed: usize,
}

/// The batching engine (module doc).
pub struct Engine<'a> {
    decoder: &'a Decoder,
    cache: &'a mut KvCache,
    config: EngineConfig,
    preemption: Preemption,
    /// Most blocks the cache may hold.
    max_blocks: usize,
    waiting: VecDeque<Live>,
    running: Vec<Live>,
    preempted: VecDeque<Live>,
    next_id: usize,
    stats: EngineStats,
}

impl<'a> Engine<'a> {
    /// An engine over `decoder` and `cache` (`budget` bytes, preempting as `preemption` says).
    pub fn new(
        decoder: &'a Decoder,
        cache: &'a mut KvCache,
        budget: u64,
        preemption: Preemption,
        config: EngineConfig,
    ) -> Self {
        let (_, stride) = cache.segment_shape();
        Engine {
            decoder,
            cache,
            config,
            preemption,
            max_blocks: (budget / stride.max(1)) as usize,
            waiting: VecDeque::new(),
            running: Vec::new(),
            preempted: VecDeque::new(),
            next_id: 0,
            stats: EngineStats::default(),
        }
    }

    /// Queues `r`; returns its id.
    ///
    /// # Errors
    /// An empty prompt, `max_new_tokens` 0, a prompt that leaves no room in the context, or a
    /// prompt longer than the whole KV budget.
    pub fn add(&mut self, r: Request) -> Result<usize> {
        let ctx = self.decoder.cfg.max_position_embeddings;
        let bt = self.cache.geometry().block_tokens as usize;
        if r.prompt.is_empty() {
            return Err(ArgumentError::zero("generate: prompt tokens").into());
        }
        if r.max_new_tokens == 0 {
            return Err(ArgumentError::zero("generate: max_new_tokens").into());
        }
        if r.prompt.len() >= ctx {
            return Err(ArgumentError::too_many(
                format!(
                    "generate: prompt tokens (the model's context of {ctx}, less one to generate)"
                ),
                r.prompt.len() as u64,
                ctx.saturating_sub(1) as u64,
            )
            .into());
        }
        if (r.prompt.len() + 1).div_ceil(bt) > self.max_blocks {
            return Err(ArgumentError::too_many(
                format!(
                    "generate: KV blocks for a prompt of {} tokens (the budget's)",
                    r.prompt.len()
                ),
                (r.prompt.len() + 1).div_ceil(bt) as u64,
                self.max_blocks as u64,
            )
            .into());
        }
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Live {
            id,
            prompt_len: r.prompt.len(),
            tokens: r.prompt,
            max_new: r.max_new_tokens,
            stop: r.stop,
            sampler: Sampler::new(r.sampling),
            seq: None,
            computed: 0,
        });
        Ok(id)
    }

    /// Whether every request has finished.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty() && self.preempted.is_empty()
    }

    /// Requests waiting for admission, running, and preempted.
    pub fn queues(&self) -> (usize, usize, usize) {
        (self.waiting.len(), self.running.len(), self.preempted.len())
    }

    /// Most KV blocks the cache may hold.
    pub fn max_blocks(&self) -> usize {
        self.max_blocks
    }

    /// The counters so far.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// The KV cache.
    pub fn cache(&self) -> &KvCache {
        self.cache
    }

    /// Runs one step (module doc) and returns its events.
    ///
    /// # Errors
    /// A KV budget that cannot hold even one request; device errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn step(&mut self) -> Result<Vec<Event>> {
        let Some(planned) = self.plan_step()? else {
            return Ok(Vec::new());
        };
        let start = Instant::now();
        let logits = self.decoder.forward(self.cache, &planned.plain())?;
        self.complete_step(planned, logits, start.elapsed().as_secs_f64())
    }

    /// [`Engine::step`] without blocking (every target; the browser's form).
    ///
    /// # Errors
    /// As [`Engine::step`].
    pub async fn step_async(&mut self) -> Result<Vec<Event>> {
        let Some(planned) = self.plan_step()? else {
            return Ok(Vec::new());
        };
        let start = Instant::now();
        let logits = self
            .decoder
            .forward_async(self.cache, &planned.plain())
            .await?;
        self.complete_step(planned, logits, start.elapsed().as_secs_f64())
    }

    /// Chooses the step's chunks: resumes preempted requests, reserves the running requests'
    /// next tokens, admits waiting ones while the step's token budget lasts. `None` when idle.
    fn plan_step(&mut self) -> Result<Option<Planned>> {
        let mut chunks: Vec<(usize, Chunk)> = Vec::new();
        let mut budget = self.config.step_tokens.max(1);
        self.resume_preempted()?;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            // `None`: request i left `running` (preempted); i now names the next one.
            if let Some(c) = self.reserve(i, budget)? {
                budget -= c.tokens.len();
                chunks.push((self.running[i].id, c));
                i += 1;
            }
            self.collect_preempted(&mut chunks);
        }
        let mut admitted = Vec::new();
        while budget > 0 && self.preempted.is_empty() && self.admit_next(budget)? {
            let i = self.running.len() - 1;
            admitted.push(Event::Admitted {
                id: self.running[i].id,
            });
            if let Some(c) = self.reserve(i, budget)? {
                budget -= c.tokens.len();
                chunks.push((self.running[i].id, c));
            }
            self.collect_preempted(&mut chunks);
        }
        if chunks.is_empty() {
            if self.is_idle() {
                return Ok(None);
            }
            return Err(Error::invalid(
                "generate: the KV budget cannot hold the next request's tokens",
            ));
        }
        self.stats.max_batch = self.stats.max_batch.max(chunks.len());
        let used = self.cache.stats().ledger.used_blocks;
        self.stats.peak_kv_blocks = self.stats.peak_kv_blocks.max(used);
        Ok(Some(Planned { chunks, admitted }))
    }

    /// Counts the step that took `secs`, then applies its logits ([`Engine::finish_step`]).
    fn complete_step(
        &mut self,
        planned: Planned,
        logits: Vec<Vec<f32>>,
        secs: f64,
    ) -> Result<Vec<Event>> {
        let Planned { chunks, admitted } = planned;
        self.stats.steps += 1;
        let mut decode = false;
        for (_, c) in &chunks {
            let live = self.running.iter().find(|l| l.seq == Some(c.seq));
            let prompt_len = live.map_or(0, |l| l.prompt_len);
            let end = c.start + c.tokens.len();
            if c.start >= prompt_len {
                if c.tokens.len() == 1 && live.is_some_and(|l| l.tokens.len() == end) {
                    self.stats.decode_tokens += 1;
                    self.stats.decode_kv_bytes += end as u64 * self.cache.geometry().token_bytes();
                    decode = true;
                } else {
                    self.stats.recomputed_tokens += c.tokens.len() as u64;
                }
            } else {
                self.stats.prefill_tokens += (end.min(prompt_len) - c.start) as u64;
                self.stats.recomputed_tokens += end.saturating_sub(prompt_len) as u64;
            }
        }
        if decode {
            self.stats.decode_secs += secs;
        } else {
            self.stats.prefill_secs += secs;
        }
        let mut events = admitted;
        events.extend(self.finish_step(&chunks, logits)?);
        Ok(events)
    }

    /// Applies the forward pass's results: advances each chunk's request, samples where the
    /// chunk reached the last token, ends finished requests.
    fn finish_step(
        &mut self,
        chunks: &[(usize, Chunk)],
        logits: Vec<Vec<f32>>,
    ) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        let mut logits = logits.into_iter();
        let ctx = self.decoder.cfg.max_position_embeddings;
        for (id, c) in chunks {
            let Some(k) = self.running.iter().position(|l| l.id == *id) else {
                continue;
            };
            let live = &mut self.running[k];
            live.computed = c.start + c.tokens.len();
            if !c.logits {
                continue;
            }
            let row = logits.next().ok_or_else(|| {
                Error::invariant(
                    "the forward pass returns one logit row per chunk that asks",
                    "fewer rows than asked",
                )
            })?;
            let token = live.sampler.sample(&row);
            live.tokens.push(token);
            events.push(Event::Token { id: *id, token });
            let generated = live.tokens.len() - live.prompt_len;
            let finish = if live.stop.contains(&token) {
                Some(Finish::Stop)
            } else if generated >= live.max_new {
                Some(Finish::Length)
            } else if live.tokens.len() >= ctx {
                Some(Finish::Context)
            } else {
                None
            };
            if let Some(finish) = finish {
                let live = self.running.remove(k);
                if let Some(seq) = live.seq {
                    self.cache.free(seq)?;
                }
                events.push(Event::Finished { id: *id, finish });
            }
        }
        Ok(events)
    }

    /// Reserves slots for running request `i`'s next chunk (at most `budget` tokens). `None`
    /// when the request was preempted to make room for itself (it left `running`).
    fn reserve(&mut self, i: usize, budget: usize) -> Result<Option<Chunk>> {
        let live = &self.running[i];
        let end = live.tokens.len().min(live.computed + budget);
        let seq = match live.seq {
            Some(seq) => seq,
            None => {
                let a = self.cache.admit(&live.tokens[..end], self.config.salt)?;
                let live = &mut self.running[i];
                live.seq = Some(a.seq);
                live.computed = a.cached_tokens;
                return Ok(Some(self.chunk(i, a.seq, end)));
            }
        };
        let have = self.cache.tokens(seq)?.len();
        for pos in have..end {
            let token = self.running[i].tokens[pos];
            match self.cache.append(seq, token) {
                Ok(_) => {}
                Err(Error::Kv(e)) if e.is_retryable() => {
                    if self.running.len() == 1 {
                        return Err(ArgumentError::too_many(
                            "generate: tokens of one request (the KV budget's)",
                            end as u64,
                            (self.max_blocks * self.cache.geometry().block_tokens as usize) as u64,
                        )
                        .into());
                    }
                    // Nothing else to take from: this request steps aside.
                    self.cache.truncate(seq, self.running[i].computed)?;
                    self.cache.preempt(seq)?;
                    let _ = self.cache.take_preempted();
                    let live = self.running.remove(i);
                    self.stats.preemptions += 1;
                    self.preempted.push_front(live);
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Some(self.chunk(i, seq, end)))
    }

    fn chunk(&self, i: usize, seq: SeqId, end: usize) -> Chunk {
        let live = &self.running[i];
        Chunk {
            seq,
            start: live.computed,
            tokens: live.tokens[live.computed..end].to_vec(),
            logits: end == live.tokens.len(),
        }
    }

    /// Moves requests the cache preempted out of `running` and their chunks out of the step.
    fn collect_preempted(&mut self, chunks: &mut Vec<(usize, Chunk)>) {
        for seq in self.cache.take_preempted() {
            if let Some(k) = self.running.iter().position(|l| l.seq == Some(seq)) {
                let live = self.running.remove(k);
                chunks.retain(|(id, _)| *id != live.id);
                self.stats.preemptions += 1;
                self.preempted.push_back(live);
            }
        }
    }

    /// Resumes the oldest preempted request when the cache has room for it and one block per
    /// running request, or when nothing else runs.
    fn resume_preempted(&mut self) -> Result<()> {
        while let Some(live) = self.preempted.front() {
            let bt = self.cache.geometry().block_tokens as usize;
            let need = (live.tokens.len() + 1).div_ceil(bt) + self.running.len();
            if !self.running.is_empty() && need > self.available_blocks() {
                return Ok(());
            }
            let mut live = self.preempted.pop_front().unwrap_or_else(|| unreachable!());
            let Some(seq) = live.seq else {
                self.running.push(live);
                continue;
            };
            let a = self.cache.resume(seq)?;
            let held = self.cache.tokens(seq)?.len();
            if held > live.computed {
                self.cache.truncate(seq, live.computed)?;
            }
            if self.preemption == Preemption::Recompute {
                live.computed = a.cached_tokens.min(live.computed);
            }
            self.running.push(live);
            let mut none = Vec::new();
            self.collect_preempted(&mut none);
        }
        Ok(())
    }

    /// Blocks the cache can still hand out: free, idle cached, and not yet grown.
    fn available_blocks(&self) -> usize {
        let s = self.cache.stats().ledger;
        self.max_blocks.saturating_sub(s.used_blocks)
    }

    /// Moves the next waiting request to `running` when its first chunk fits beside one block
    /// per running request.
    fn admit_next(&mut self, budget: usize) -> Result<bool> {
        let Some(next) = self.waiting.front() else {
            return Ok(false);
        };
        let bt = self.cache.geometry().block_tokens as usize;
        let first = next.tokens.len().min(budget);
        let need = (first + 1).div_ceil(bt) + self.running.len();
        if !self.running.is_empty() && need > self.available_blocks() {
            return Ok(false);
        }
        let live = self.waiting.pop_front().unwrap_or_else(|| unreachable!());
        self.running.push(live);
        Ok(true)
    }
}

/// A step's chunks (with their requests' ids) and the admissions made while choosing them.
struct Planned {
    chunks: Vec<(usize, Chunk)>,
    admitted: Vec<Event>,
}

impl Planned {
    fn plain(&self) -> Vec<Chunk> {
        self.chunks.iter().map(|(_, c)| c.clone()).collect()
    }
}
