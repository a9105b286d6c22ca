//! One decoder layer of a step, and the ops it is made of, over [`Temp`] intermediates.
//!
//! Every intermediate is a [`Temp`]: freed by [`Temp::free`] right after its last use (so a
//! record-and-replay pool sees the same allocation order every step and the step's peak stays
//! low), or by its drop when an error ends the step early, so a failing dispatch leaves nothing
//! allocated.

use std::ops::Deref;

use tensormem::{DType, Error, Op, Result, Runtime, Tensor};

use super::forward::{Decoder, StepView};
use super::weights::{Layer, Linear};

/// An intermediate tensor of a step (module doc).
pub struct Temp<'a> {
    rt: &'a Runtime,
    t: Option<Tensor>,
}

impl Temp<'_> {
    /// Frees the tensor now, reporting the runtime's error.
    pub fn free(mut self) -> Result<()> {
        self.t.take().map_or(Ok(()), |t| self.rt.free(t))
    }

    /// The tensor, no longer freed by this guard (the caller frees it).
    pub fn into_inner(mut self) -> Tensor {
        self.t
            .take()
            .unwrap_or_else(|| unreachable!("a Temp holds its tensor until consumed"))
    }
}

impl Deref for Temp<'_> {
    type Target = Tensor;

    fn deref(&self) -> &Tensor {
        self.t
            .as_ref()
            .unwrap_or_else(|| unreachable!("a Temp holds its tensor until consumed"))
    }
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.t.take() {
            let _ = self.rt.free(t);
        }
    }
}

impl Decoder {
    /// Allocates an output of `shape` and runs `op` into it.
    pub(super) fn op(
        &self,
        op: &Op,
        inputs: &[&Tensor],
        shape: &[usize],
        label: &str,
    ) -> Result<Temp<'_>> {
        let out = Temp {
            rt: &self.rt,
            t: Some(self.rt.alloc(DType::F32, shape, label)?),
        };
        self.rt.dispatch(op, inputs, &[&*out])?;
        Ok(out)
    }

    /// `x · Wᵀ (+ bias)` for `rows` rows of `x`.
    pub(super) fn linear(
        &self,
        x: &Tensor,
        l: &Linear,
        rows: usize,
        label: &str,
    ) -> Result<Temp<'_>> {
        let op = Op::MatMul {
            batch: 1,
            m: rows as u32,
            n: l.out as u32,
            k: l.inp as u32,
            trans_a: false,
            trans_b: true,
            broadcast_b: true,
            bias: l.bias.is_some(),
            alpha: 1.0,
            weight_format: l.format,
        };
        let mut inputs = vec![x, &l.w];
        inputs.extend(l.scales.as_ref());
        inputs.extend(l.bias.as_ref());
        self.op(&op, &inputs, &[rows, l.out], label)
    }

    pub(super) fn rms_norm(&self, x: &Tensor, w: &Tensor, rows: usize) -> Result<Temp<'_>> {
        let cols = self.cfg.hidden_size;
        let op = Op::RmsNorm {
            rows: rows as u32,
            cols: cols as u32,
            eps: self.cfg.rms_norm_eps,
        };
        self.op(&op, &[x, w], &[rows, cols], "rmsnorm")
    }

    fn add(&self, a: &Tensor, b: &Tensor, len: usize) -> Result<Temp<'_>> {
        let len = len as u32;
        let op = Op::Add { len, b_len: len };
        self.op(&op, &[a, b], &[len as usize], "residual")
    }

    /// Rotary embeddings of `t` (`heads` heads), which is freed.
    fn rope<'a>(&'a self, t: Temp<'a>, heads: usize, v: &StepView<'_>) -> Result<Temp<'a>> {
        let hd = self.cfg.head_dim();
        let op = Op::Rope {
            tokens: v.n as u32,
            heads: heads as u32,
            head_dim: hd as u32,
            theta: self.cfg.rope_theta,
        };
        let r = self.op(&op, &[&t, v.positions], &[v.n, heads * hd], "rope")?;
        t.free()?;
        Ok(r)
    }

    /// Layer `li` over the residual stream `x` (freed): attention over the paged KV cache (this
    /// step's keys and values written first), then the SwiGLU MLP, each with its residual.
    pub(super) fn layer<'a>(
        &'a self,
        li: usize,
        layer: &Layer,
        x: Temp<'a>,
        v: &StepView<'_>,
    ) -> Result<Temp<'a>> {
        let (n, cfg) = (v.n, &self.cfg);
        let (h, hd) = (cfg.hidden_size, cfg.head_dim());
        let (hq, hkv) = (cfg.num_attention_heads, cfg.kv_heads());
        let hn = self.rms_norm(&x, &layer.attn_norm, n)?;
        let q = self.linear(&hn, &layer.q, n, "q")?;
        let k = self.linear(&hn, &layer.k, n, "k")?;
        let val = self.linear(&hn, &layer.v, n, "v")?;
        hn.free()?;
        let q = self.rope(q, hq, v)?;
        let k = self.rope(k, hkv, v)?;
        for &si in v.used {
            let Some(slots) = v.slots[si] else { continue };
            let op = Op::KvWrite {
                kv: v.kv,
                blocks: (v.segments[si].size() / v.stride) as u32,
                stride: v.stride as u32,
                layer: li as u32,
                tokens: n as u32,
            };
            self.rt
                .dispatch(&op, &[&k, &val, slots], &[&v.segments[si]])?;
        }
        k.free()?;
        val.free()?;
        let mut carry: Option<Temp<'a>> = None;
        let mut attn = None;
        for (j, &si) in v.used.iter().enumerate() {
            let last = j + 1 == v.used.len();
            let op = Op::PagedAttention {
                kv: v.kv,
                blocks: (v.segments[si].size() / v.stride) as u32,
                stride: v.stride as u32,
                first_block: (si * v.per_segment) as u32,
                layer: li as u32,
                tokens: n as u32,
                q_heads: hq as u32,
                rows: v.rows as u32,
                width: v.width as u32,
                scale: 1.0 / (hd as f32).sqrt(),
                carry_in: carry.is_some(),
                carry_out: !last,
            };
            let mut ins: Vec<&Tensor> = vec![&q, &v.segments[si], v.tables, v.meta];
            ins.extend(carry.as_deref());
            let shape = if last {
                vec![n, hq * hd]
            } else {
                vec![n, hq, hd + 2]
            };
            let out = self.op(&op, &ins, &shape, "attention")?;
            if let Some(c) = carry.take() {
                c.free()?;
            }
            if last {
                attn = Some(out);
            } else {
                carry = Some(out);
            }
        }
        q.free()?;
        let attn = attn.ok_or_else(|| {
            Error::invariant(
                "a step's tokens reach at least one KV segment",
                "none reached",
            )
        })?;
        let o = self.linear(&attn, &layer.o, n, "attn out")?;
        attn.free()?;
        let x1 = self.add(&x, &o, n * h)?;
        o.free()?;
        x.free()?;
        let hn = self.rms_norm(&x1, &layer.mlp_norm, n)?;
        let gate = self.linear(&hn, &layer.gate, n, "gate")?;
        let up = self.linear(&hn, &layer.up, n, "up")?;
        hn.free()?;
        let len = (n * cfg.intermediate_size) as u32;
        let a = self.op(
            &Op::SiluMul { len },
            &[&gate, &up],
            &[len as usize],
            "swiglu",
        )?;
        gate.free()?;
        up.free()?;
        let d = self.linear(&a, &layer.down, n, "down")?;
        a.free()?;
        let x2 = self.add(&x1, &d, n * h)?;
        x1.free()?;
        d.free()?;
        Ok(x2)
    }
}
