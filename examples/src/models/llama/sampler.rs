//! Choosing the next token from logits: greedy, or seeded sampling with temperature, top-k and
//! top-p (nucleus), applied in that order as Hugging Face's `generate` does. Each request has its
//! own generator, so a request's tokens depend on its seed, not on what it was batched with.

/// How a request picks its tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 is greedy (the first of the highest logits); above 0 divides the logits.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Seed of the request's generator.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// A request's generator (splitmix64).
#[derive(Clone, Debug)]
pub struct Sampler {
    state: u64,
    how: Sampling,
}

impl Sampler {
    /// A generator for `how`.
    pub fn new(how: Sampling) -> Self {
        Sampler {
            state: how.seed ^ 0x6a09_e667_f3bc_c908,
            how,
        }
    }

    fn next_f64(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next token for `logits`.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let greedy = || {
            let mut best = 0;
            for (i, &v) in logits.iter().enumerate() {
                if v > logits[best] {
                    best = i;
                }
            }
            best as u32
        };
        if self.how.temperature <= 0.0 || logits.len() < 2 {
            return greedy();
        }
        let mut order: Vec<usize> = (0..logits.len())
            .filter(|&i| logits[i].is_finite())
            .collect();
        if order.is_empty() {
            return greedy();
        }
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if self.how.top_k > 0 {
            order.truncate(self.how.top_k);
        }
        let t = f64::from(self.how.temperature);
        let max = f64::from(logits[order[0]]);
        let mut p: Vec<f64> = order
            .iter()
            .map(|&i| ((f64::from(logits[i]) - max) / t).exp())
            .collect();
        let z: f64 = p.iter().sum();
        p.iter_mut().for_each(|v| *v /= z);
        if self.how.top_p < 1.0 {
            let mut acc = 0.0;
            let keep = p
                .iter()
                .position(|&v| {
                    acc += v;
                    acc >= f64::from(self.how.top_p)
                })
                .map_or(p.len(), |i| i + 1);
            p.truncate(keep);
            order.truncate(keep);
        }
        let total: f64 = p.iter().sum();
        let mut u = self.next_f64() * total;
        for (k, &v) in p.iter().enumerate() {
            if u < v {
                return order[k] as u32;
            }
            u -= v;
        }
        order[p.len() - 1] as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut s = Sampler::new(Sampling::default());
        assert_eq!(s.sample(&[0.1, 2.0, 2.0, -1.0]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_and_seeds_repeat() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let how = |top_k, seed| Sampling {
            temperature: 1.0,
            top_k,
            top_p: 1.0,
            seed,
        };
        let mut s = Sampler::new(how(1, 7));
        let g = Sampler::new(Sampling::default()).sample(&logits);
        assert!((0..20).all(|_| s.sample(&logits) == g));
        let draw = |seed| {
            let mut s = Sampler::new(how(0, seed));
            (0..32).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // One token holds ~88% of the mass: top_p 0.5 keeps it alone.
        let logits = [5.0f32, 3.0, 0.0, 0.0];
        let mut s = Sampler::new(Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
            seed: 1,
        });
        assert!((0..100).all(|_| s.sample(&logits) == 0));
        let mut s = Sampler::new(Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 1,
        });
        assert!((0..400).any(|_| s.sample(&logits) != 0));
    }
}
