//! GPU step time of one forward pass: Dynamo mocker's polynomial in the prefill tokens and the
//! decode load (KV tokens attended over the cache's capacity), fixed times, tables (prefill over
//! tokens and batch, decode over batch and context), or operator tables (AIConfigurator's
//! mixed-pass model: one pass of every operator but attention over all its tokens, plus the
//! attention of its prefill chunks and of its decodes).

mod grid;
mod padding;

pub use grid::Grid;
pub use padding::{CaptureSizes, Lockstep};

use crate::config::{FixedTiming, OpTables, PolynomialTiming, TimingConfig};

/// What one pass computes, as the timing models see it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PassShape {
    /// Uncached prompt tokens computed in the pass.
    pub prefill_tokens: u64,
    /// Requests prefilling in the pass.
    pub prefill_requests: u32,
    /// Requests decoding one token in the pass.
    pub decode_requests: u32,
    /// KV tokens the decoding requests attend over (their context lengths, this token included).
    pub decode_kv_tokens: u64,
    /// The longest context of a decoding request (this token included): the row the decode
    /// attention kernel finishes last.
    pub decode_max_context: u32,
    /// Prefill chunks computing at least one token, the earlier tokens they attend over (a
    /// cached prefix or earlier chunks of the same prompt), and their attention work
    /// `sum n (p + (n + 1) / 2)` over chunks of `n` new tokens after `p` earlier ones: what the
    /// operator tables price prefill attention by.
    pub chunks: u32,
    pub chunk_prefix_tokens: u64,
    pub chunk_attention_work: f64,
}

impl PassShape {
    /// The pass of requests given as (prefilling, tokens computed in the pass, KV tokens after
    /// it): a prefilling request's chunk attends over what its prompt already holds (a cached
    /// prefix and its earlier chunks), a decoding one over its whole context.
    pub fn of(requests: impl Iterator<Item = (bool, u32, u32)>) -> PassShape {
        let mut shape = PassShape::default();
        for (prefilling, tokens, computed) in requests {
            if prefilling {
                shape.add_chunk(tokens, computed - tokens);
            } else {
                shape.decode_requests += 1;
                shape.decode_kv_tokens += u64::from(computed);
                shape.decode_max_context = shape.decode_max_context.max(computed);
            }
        }
        shape
    }

    /// Count a prefill chunk of `tokens` new tokens after `prefix` earlier ones of its prompt.
    pub fn add_chunk(&mut self, tokens: u32, prefix: u32) {
        self.prefill_tokens += u64::from(tokens);
        self.prefill_requests += 1;
        if tokens > 0 {
            self.chunks += 1;
            self.chunk_prefix_tokens += u64::from(prefix);
            self.chunk_attention_work += attention_work(f64::from(tokens), f64::from(prefix));
        }
    }
}

/// The attention work of a chunk of `n` new tokens after `p` earlier ones: each new token
/// attends to the earlier tokens and to the new ones up to itself.
fn attention_work(n: f64, p: f64) -> f64 {
    n * (p + (n + 1.0) / 2.0)
}

#[derive(Debug, Clone)]
enum Model {
    Polynomial(PolynomialTiming),
    Fixed(FixedTiming),
    Table { prefill: Grid<2>, decode: Grid<2> },
    Ops(Box<Ops>),
}

/// Operator tables compiled to grids.
#[derive(Debug, Clone)]
struct Ops {
    non_attention: Grid<1>,
    /// The non-attention time by family of operations, for explaining a pass only (the price
    /// reads `non_attention`, their sum).
    non_attention_parts: Vec<(String, Grid<1>)>,
    /// The parts that run on every data-parallel rank's tokens together (a MoE model's experts
    /// and their dispatch), summed: a grouped pass prices them at the group's tokens.
    group: Option<Grid<1>>,
    context_attention: Grid<3>,
    decode_attention: Grid<2>,
    mixed_decode: MixedDecode,
    /// CUDA graphs the engine pads a pass to (none: every pass at its own size).
    graphs: CaptureSizes,
}

/// How the decode rows of a pass that also prefills are priced.
#[derive(Debug, Clone)]
enum MixedDecode {
    /// Their attention in a pass of decodes only, times this.
    Factor(f64),
    /// Measured: over decode rows, mean context and the pass's prefill tokens.
    Table(Grid<3>),
}

/// Parts of a non-attention family that run on every data-parallel rank's tokens together.
const GROUP_PARTS: [&str; 2] = ["moe", "moe_dispatch"];

/// The attention of one pass by part (ms).
#[derive(Debug, Clone, Copy, Default)]
struct Attention {
    prefill: f64,
    decode: f64,
    /// What the longest decode row adds to a batch priced at its mean context.
    decode_spread: f64,
    /// What the decode rows of a mixed pass cost beyond their price in a pass of decodes.
    mixed_decode: f64,
}

impl Attention {
    fn total(&self) -> f64 {
        self.prefill + self.decode + self.decode_spread + self.mixed_decode
    }
}

/// The tokens a pass of `shape` computes with the non-attention operators, and the parts that
/// move them away from its own count.
#[derive(Debug, Clone, Copy)]
struct Tokens {
    /// Its chunks' tokens and one per decoding request.
    own: f64,
    /// What the operators run on: `own`, or the captured graph it is padded to.
    run: f64,
    /// Grouped data-parallel pass: the group's tokens per rank the MoE layers run on.
    moe: Option<f64>,
}

impl Ops {
    fn new(t: OpTables) -> Self {
        let flat2 = |g: Vec<Vec<f64>>| g.into_iter().flatten().collect();
        let flat3 = |g: Vec<Vec<Vec<f64>>>| g.into_iter().flatten().flatten().collect();
        let group_values: Vec<&Vec<f64>> = GROUP_PARTS
            .iter()
            .filter_map(|name| t.non_attention_parts.get(*name))
            .collect();
        let group = (!group_values.is_empty()).then(|| {
            let sum = (0..t.tokens.len())
                .map(|i| group_values.iter().map(|v| v[i]).sum())
                .collect();
            Grid::new([&t.tokens], sum)
        });
        let non_attention_parts = t
            .non_attention_parts
            .iter()
            .map(|(name, values)| (name.clone(), Grid::new([&t.tokens], values.clone())))
            .collect();
        let mixed_decode = match t.mixed_decode_attention {
            Some(m) => MixedDecode::Table(Grid::new(
                [&m.batch, &m.context, &m.prefill_tokens],
                flat3(m.ms),
            )),
            None => MixedDecode::Factor(t.mixed_decode_factor),
        };
        Ops {
            non_attention: Grid::new([&t.tokens], t.non_attention_ms),
            non_attention_parts,
            group,
            context_attention: Grid::new(
                [&t.chunk_batch, &t.chunk_tokens, &t.chunk_prefix],
                flat3(t.context_attention_ms),
            ),
            decode_attention: Grid::new(
                [&t.decode_batch, &t.decode_context],
                flat2(t.decode_attention_ms),
            ),
            mixed_decode,
            graphs: CaptureSizes::default(),
        }
    }

    /// What a pass of `shape` computes with the non-attention operators: padded to a captured
    /// graph (alone), or to the group's graph when its data-parallel group passes in lockstep.
    fn tokens(&self, shape: &PassShape, lockstep: Option<&Lockstep>) -> Tokens {
        let own = shape.prefill_tokens + u64::from(shape.decode_requests);
        let run = match lockstep {
            Some(l) => l.pad_to.unwrap_or(own),
            None => self.graphs.pad(own),
        };
        Tokens {
            own: own as f64,
            run: run as f64,
            moe: lockstep.map(|l| l.moe_tokens_per_rank),
        }
    }

    /// The attention of a pass. Chunks: the table's value for that many equal chunks of the
    /// mean size after the mean prefix, scaled by the chunks' actual attention work over the
    /// equal chunks' work. Decodes: the table's value at the batch's mean context, which is
    /// what the kernel reads (the sum of the contexts); plus the longest row's own time beyond
    /// a row at the mean, because the kernel ends when its longest row does: a row's work is
    /// split over thread blocks that the shorter rows finish first. It is at most what
    /// padding every row to the longest would cost, and 0 when all rows are equal. In a pass
    /// that also prefills, the decode rows cost what `mixed_decode` says.
    fn attention(&self, shape: &PassShape) -> Attention {
        let mut a = Attention::default();
        if shape.chunks > 0 {
            let b = f64::from(shape.chunks);
            let (n, p) = (
                shape.prefill_tokens as f64 / b,
                shape.chunk_prefix_tokens as f64 / b,
            );
            let equal = self.context_attention.at([b, n, p]);
            a.prefill = equal * shape.chunk_attention_work / (b * attention_work(n, p));
        }
        if shape.decode_requests > 0 {
            let b = f64::from(shape.decode_requests);
            let mean = shape.decode_kv_tokens as f64 / b;
            a.decode = self.decode_attention.at([b, mean]);
            let max = f64::from(shape.decode_max_context);
            if max > mean {
                let longest = self.decode_attention.at([1.0, max]);
                a.decode_spread = (longest - self.decode_attention.at([1.0, mean])).max(0.0);
            }
            if shape.chunks > 0 {
                a.mixed_decode = match &self.mixed_decode {
                    MixedDecode::Factor(f) => (f - 1.0) * (a.decode + a.decode_spread),
                    MixedDecode::Table(t) => {
                        let p = shape.prefill_tokens as f64;
                        t.at([b, mean, p]) - a.decode - a.decode_spread
                    }
                };
            }
        }
        a
    }

    /// One pass: the non-attention operators over the tokens it runs (the MoE layers of a
    /// grouped pass over the group's), plus its attention. Out of line, so the other models'
    /// price inlines into the decode loop.
    #[inline(never)]
    fn pass_ms(&self, shape: &PassShape, lockstep: Option<&Lockstep>) -> f64 {
        let t = self.tokens(shape, lockstep);
        if t.own == 0.0 {
            return 0.0;
        }
        let mut ms = self.non_attention.at([t.run]);
        if let (Some(moe), Some(group)) = (t.moe, &self.group) {
            ms += group.at([moe]) - group.at([t.run]);
        }
        ms + self.attention(shape).total()
    }

    fn part_names(&self) -> Vec<String> {
        let mut names: Vec<String> = match self.non_attention_parts.is_empty() {
            true => vec!["non_attention".to_string()],
            false => self
                .non_attention_parts
                .iter()
                .map(|(n, _)| n.clone())
                .collect(),
        };
        if self.graphs.largest() > 0 {
            names.push("graph_padding".to_string());
        }
        if self.group.is_some() {
            names.push("moe_other_ranks".to_string());
        }
        names.extend(OPS_ATTENTION_PARTS.iter().map(|n| n.to_string()));
        names
    }

    /// The parts of `pass_ms`, in `part_names` order: each family over the pass's own tokens,
    /// what padding to a graph adds, what the other data-parallel ranks' tokens add to the
    /// MoE layers beyond the equal share the tables assume, then the attention.
    fn add_parts(&self, shape: &PassShape, lockstep: Option<&Lockstep>, out: &mut [f64]) {
        let t = self.tokens(shape, lockstep);
        if t.own == 0.0 {
            return;
        }
        let mut k = if self.non_attention_parts.is_empty() {
            out[0] += self.non_attention.at([t.own]);
            1
        } else {
            for (slot, (_, grid)) in out.iter_mut().zip(&self.non_attention_parts) {
                *slot += grid.at([t.own]);
            }
            self.non_attention_parts.len()
        };
        if self.graphs.largest() > 0 {
            out[k] += self.non_attention.at([t.run]) - self.non_attention.at([t.own]);
            k += 1;
        }
        if let Some(group) = &self.group {
            if let Some(moe) = t.moe {
                out[k] += group.at([moe]) - group.at([t.run]);
            }
            k += 1;
        }
        let a = self.attention(shape);
        let attention = [a.prefill, a.decode, a.decode_spread, a.mixed_decode];
        for (slot, v) in out[k..].iter_mut().zip(attention) {
            *slot += v;
        }
    }
}

/// The parts of an operator-table price after the non-attention ones, in order.
const OPS_ATTENTION_PARTS: [&str; 4] = [
    "prefill_attention",
    "decode_attention",
    "decode_spread",
    "mixed_decode_attention",
];

/// The price of passes of decodes only, from [`StepTimer::decode_price`].
#[derive(Debug, Clone, Copy)]
pub enum DecodePrice<'a> {
    /// Every such pass costs this (ms).
    Constant(f64),
    Polynomial(PolynomialDecode),
    /// The model's own price.
    Model(&'a StepTimer),
}

/// The polynomial's decode time over a cache's capacity, its speedups multiplied once.
#[derive(Debug, Clone, Copy)]
pub struct PolynomialDecode {
    kv_capacity_tokens: f64,
    divisor: f64,
}

impl PolynomialDecode {
    /// The decode time (ms) of a pass of `shape`.
    #[inline(always)]
    pub fn ms(&self, shape: &PassShape) -> f64 {
        let load = (shape.decode_kv_tokens as f64 / self.kv_capacity_tokens).min(1.0);
        let ms = (-25.74 * load * load + 54.01 * load + 5.74).max(1.0);
        ms / self.divisor
    }
}

/// A step-time model bound to one worker's cache size.
#[derive(Debug, Clone)]
pub struct StepTimer {
    model: Model,
    /// Tokens the whole KV cache holds (`num_gpu_blocks * block_size`).
    kv_capacity_tokens: f64,
}

impl StepTimer {
    /// The model of `config` for a worker whose cache holds `kv_capacity_tokens` tokens.
    pub fn new(config: TimingConfig, kv_capacity_tokens: u64) -> Self {
        let model = match config {
            TimingConfig::Polynomial(p) => Model::Polynomial(p),
            TimingConfig::Fixed(f) => Model::Fixed(f),
            TimingConfig::Table(t) => Model::Table {
                prefill: Grid::new(
                    [&t.prefill_tokens, &t.prefill_batch],
                    t.prefill_ms.iter().flatten().copied().collect(),
                ),
                decode: Grid::new(
                    [&t.decode_batch, &t.decode_context],
                    t.decode_ms.iter().flatten().copied().collect(),
                ),
            },
            TimingConfig::OpTables(t) => Model::Ops(Box::new(Ops::new(t))),
            TimingConfig::Aic(_) => {
                unreachable!("aic timing is resolved to tables before a replay (check_replayable)")
            }
        };
        StepTimer {
            model,
            kv_capacity_tokens: kv_capacity_tokens as f64,
        }
    }

    /// The engine pads a pass to the CUDA graphs captured for `sizes` (operator tables price
    /// measured operators at the tokens they run on; the other models price whole passes).
    pub fn with_graph_sizes(mut self, sizes: Vec<u32>) -> Self {
        if let Model::Ops(ops) = &mut self.model {
            ops.graphs = CaptureSizes::new(sizes);
        }
        self
    }

    /// What the data-parallel ranks of a grouped pass compute, each rank computing `tokens`
    /// (see [`CaptureSizes::lockstep`]).
    pub fn lockstep(&self, tokens: &[u64]) -> Lockstep {
        match &self.model {
            Model::Ops(ops) => ops.graphs.lockstep(tokens),
            _ => CaptureSizes::default().lockstep(tokens),
        }
    }

    /// Duration of a pass (ms). Operator tables price it as one pass; the other models add a
    /// prefill cost if it prefills anything and a decode cost if it decodes anything. A pass
    /// that computes nothing costs 0.
    #[inline]
    pub fn pass_ms(&self, shape: &PassShape) -> f64 {
        self.pass_ms_in(shape, None)
    }

    /// [`StepTimer::pass_ms`] of one rank of a data-parallel group passing in `lockstep`
    /// (operator tables price the tokens the group makes it compute; the other models price
    /// the rank's own pass).
    #[inline(always)]
    pub fn pass_ms_in(&self, shape: &PassShape, lockstep: Option<&Lockstep>) -> f64 {
        if let Model::Ops(ops) = &self.model {
            return ops.pass_ms(shape, lockstep);
        }
        let (prefill, decode) = self.prefill_and_decode_ms(shape);
        prefill + decode
    }

    /// The names of the parts [`StepTimer::add_parts`] splits a pass's price into: for
    /// operator tables each family of non-attention operations (or `non_attention`), then
    /// `graph_padding` (with CUDA graphs), `moe_other_ranks` (with MoE parts), then
    /// `prefill_attention`, `decode_attention`, `decode_spread` and `mixed_decode_attention`;
    /// for the other models `prefill` and `decode`.
    pub fn part_names(&self) -> Vec<String> {
        match &self.model {
            Model::Ops(ops) => ops.part_names(),
            _ => vec!["prefill".to_string(), "decode".to_string()],
        }
    }

    /// Add the parts of the price of a pass of `shape` (ms) to `out`, in the order of
    /// [`StepTimer::part_names`]. They sum to [`StepTimer::pass_ms`] (for operator tables up to
    /// rounding: the price reads the families' summed table).
    pub fn add_parts(&self, shape: &PassShape, lockstep: Option<&Lockstep>, out: &mut [f64]) {
        if let Model::Ops(ops) = &self.model {
            return ops.add_parts(shape, lockstep, out);
        }
        let (prefill, decode) = self.prefill_and_decode_ms(shape);
        out[0] += prefill;
        out[1] += decode;
    }

    /// How passes of decodes only like `shape` (no prefill) are priced, the model matched
    /// once for a run of them (the chained decode passes), each priced as `pass_ms` prices it.
    pub fn decode_price(&self, shape: &PassShape) -> DecodePrice<'_> {
        debug_assert_eq!(shape.prefill_tokens, 0);
        match &self.model {
            // The fixed decode time, as `pass_ms` adds it to no prefill.
            Model::Fixed(_) => DecodePrice::Constant(self.pass_ms(shape)),
            // Its decode time is at least 1 / (the ratios) > 0: adding no prefill moves no bit.
            Model::Polynomial(p) => DecodePrice::Polynomial(self.polynomial_decode(p)),
            _ => DecodePrice::Model(self),
        }
    }

    fn polynomial_decode(&self, p: &PolynomialTiming) -> PolynomialDecode {
        PolynomialDecode {
            kv_capacity_tokens: self.kv_capacity_tokens,
            divisor: p.speedup_ratio * p.decode_speedup_ratio,
        }
    }

    #[inline]
    fn prefill_and_decode_ms(&self, shape: &PassShape) -> (f64, f64) {
        let prefill = if shape.prefill_tokens > 0 {
            self.prefill_ms(shape)
        } else {
            0.0
        };
        let decode = if shape.decode_requests > 0 {
            self.decode_ms(shape)
        } else {
            0.0
        };
        (prefill, decode)
    }

    fn prefill_ms(&self, shape: &PassShape) -> f64 {
        let t = shape.prefill_tokens as f64;
        match &self.model {
            Model::Polynomial(p) => {
                (4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142) / p.speedup_ratio
            }
            Model::Fixed(f) => f.prefill_ms,
            Model::Table { prefill, .. } => prefill.at([t, f64::from(shape.prefill_requests)]),
            Model::Ops(_) => unreachable!("operator tables price the whole pass"),
        }
    }

    fn decode_ms(&self, shape: &PassShape) -> f64 {
        match &self.model {
            Model::Polynomial(p) => self.polynomial_decode(p).ms(shape),
            Model::Fixed(f) => f.decode_ms,
            Model::Table { decode, .. } => {
                let batch = f64::from(shape.decode_requests);
                decode.at([batch, shape.decode_kv_tokens as f64 / batch])
            }
            Model::Ops(_) => unreachable!("operator tables price the whole pass"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TableTiming;

    fn poly(speedup: f64, decode_speedup: f64) -> StepTimer {
        StepTimer::new(
            TimingConfig::Polynomial(PolynomialTiming {
                speedup_ratio: speedup,
                decode_speedup_ratio: decode_speedup,
            }),
            16384 * 64,
        )
    }

    fn prefill(tokens: u64) -> PassShape {
        PassShape {
            prefill_tokens: tokens,
            ..PassShape::default()
        }
    }

    #[test]
    fn eight_token_prefill_follows_the_polynomial() {
        // 4.209989e-7 * 8^2 + 1.518344e-2 * 8 + 16.50142 = 16.62291
        let ms = poly(1.0, 1.0).pass_ms(&prefill(8));
        assert!((ms - 16.6229).abs() < 5e-5, "{ms}");
    }

    #[test]
    fn decode_follows_the_load_polynomial() {
        let t = poly(1.0, 1.0);
        let half = PassShape {
            decode_requests: 1,
            decode_kv_tokens: 16384 * 32,
            ..PassShape::default()
        };
        // p = 0.5: -25.74/4 + 54.01/2 + 5.74
        assert!((t.pass_ms(&half) - 26.31).abs() < 1e-9);
        // An over-full load is clamped to p = 1.
        let over = PassShape {
            decode_kv_tokens: 16384 * 640,
            ..half
        };
        assert!((t.pass_ms(&over) - 34.01).abs() < 1e-9);
        // Speedups divide: decode by both ratios.
        assert!((poly(2.0, 2.0).pass_ms(&half) - 26.31 / 4.0).abs() < 1e-9);
    }

    #[test]
    fn table_timing_reads_batch_and_mean_context() {
        let table = TableTiming {
            prefill_tokens: vec![0.0, 1000.0],
            prefill_batch: vec![1.0, 2.0],
            prefill_ms: vec![vec![0.0, 0.0], vec![100.0, 120.0]],
            decode_batch: vec![1.0, 9.0],
            decode_context: vec![0.0, 1000.0],
            decode_ms: vec![vec![5.0, 15.0], vec![13.0, 23.0]],
        };
        let t = StepTimer::new(TimingConfig::Table(table), 1);
        // Prefill: 500 tokens (halfway) over 2 requests: 120 / 2 = 60 ms. Decode: 3 requests
        // (a quarter of the batch axis) at mean context 1500 / 3 = 500 (halfway): between
        // 5 + 8/4 = 7 (context 0) and 15 + 8/4 = 17 (context 1000), so 12 ms.
        let shape = PassShape {
            prefill_tokens: 500,
            prefill_requests: 2,
            decode_requests: 3,
            decode_kv_tokens: 1500,
            ..PassShape::default()
        };
        assert_eq!(t.pass_ms(&shape), 60.0 + 12.0);
    }

    #[test]
    fn mixed_pass_adds_both_and_empty_pass_is_free() {
        let t = StepTimer::new(
            TimingConfig::Fixed(FixedTiming {
                prefill_ms: 10.0,
                decode_ms: 3.0,
            }),
            100,
        );
        let mixed = PassShape {
            prefill_tokens: 5,
            prefill_requests: 1,
            decode_requests: 2,
            decode_kv_tokens: 40,
            ..PassShape::default()
        };
        assert_eq!(t.pass_ms(&mixed), 13.0);
        assert_eq!(t.pass_ms(&PassShape::default()), 0.0);
    }

    /// Operator tables where every table is linear, so interpolation is exact: non-attention
    /// 10 + 0.1 T ms; chunk attention b (0.01 n + 0.001 p) ms; decode attention
    /// 0.5 b + 0.001 b c ms.
    fn ops() -> StepTimer {
        StepTimer::new(TimingConfig::OpTables(op_tables()), 1)
    }

    fn op_tables() -> OpTables {
        let axis = |v: &[f64]| v.to_vec();
        let ca = |b: f64, n: f64, p: f64| b * (0.01 * n + 0.001 * p);
        OpTables {
            tokens: axis(&[0.0, 1000.0]),
            non_attention_ms: vec![10.0, 110.0],
            non_attention_parts: Default::default(),
            chunk_batch: axis(&[1.0, 2.0]),
            chunk_tokens: axis(&[0.0, 1000.0]),
            chunk_prefix: axis(&[0.0, 1000.0]),
            context_attention_ms: [1.0, 2.0]
                .iter()
                .map(|&b| {
                    [0.0, 1000.0]
                        .iter()
                        .map(|&n| vec![ca(b, n, 0.0), ca(b, n, 1000.0)])
                        .collect()
                })
                .collect(),
            decode_batch: axis(&[1.0, 4.0]),
            decode_context: axis(&[0.0, 1000.0]),
            decode_attention_ms: vec![vec![0.5, 1.5], vec![2.0, 6.0]],
            mixed_decode_factor: 1.0,
            mixed_decode_attention: None,
        }
    }

    #[test]
    fn operator_tables_price_a_pass_as_one() {
        let t = ops();
        // 3 decodes at mean context 500: non-attention over 3 tokens 10.3, attention
        // 0.5 x 3 + 0.001 x 3 x 500 = 3.0.
        let decode = PassShape {
            decode_requests: 3,
            decode_kv_tokens: 1500,
            ..PassShape::default()
        };
        assert!((t.pass_ms(&decode) - 13.3).abs() < 1e-9);
        // A chunk of 500 new tokens after a 200-token prefix, with 2 decodes at mean context
        // 500: non-attention over 502 tokens 60.2, chunk attention 5 + 0.2 = 5.2, decode
        // attention 1 + 1 = 2.0: 67.4 in one pass (prefill and decode priced apart would count
        // the non-attention operators twice).
        let mut mixed = PassShape {
            decode_requests: 2,
            decode_kv_tokens: 1000,
            ..PassShape::default()
        };
        mixed.add_chunk(500, 200);
        assert!((t.pass_ms(&mixed) - 67.4).abs() < 1e-9);
        // Chunks of 100 after 0 and 300 after 400: 2 equal chunks of 200 after 200 cost
        // 2 (2 + 0.2) = 4.4; the work 100 x 50.5 + 300 x 550.5 = 170,200 over the equal
        // chunks' 2 x 200 x 300.5 = 120,200 scales it: 4.4 x 1.41597... = 6.2303; plus
        // non-attention over 400 tokens, 50.
        let mut two = PassShape::default();
        two.add_chunk(100, 0);
        two.add_chunk(300, 400);
        let want = 50.0 + 4.4 * 170_200.0 / 120_200.0;
        assert!((t.pass_ms(&two) - want).abs() < 1e-9, "{}", t.pass_ms(&two));
        // A chunk of no new tokens computes nothing: its pass is free (no engine flavour
        // plans one: a pass computes at least a request's last token).
        let mut cached = PassShape::default();
        cached.add_chunk(0, 4096);
        assert_eq!(t.pass_ms(&cached), 0.0);
    }

    #[test]
    fn the_longest_decode_row_adds_its_own_time_beyond_the_mean() {
        let t = ops();
        // Contexts 100, 200 and 1200: 1,500 KV tokens, mean 500, longest 1200. The batch at its
        // mean: 0.5 x 3 + 0.001 x 3 x 500 = 3.0; the longest row alone beyond a row at the mean:
        // (0.5 + 1.2) - (0.5 + 0.5) = 0.7 (the context axis extended past 1000); non-attention
        // over 3 tokens 10.3.
        let shape = PassShape::of([(false, 1, 100), (false, 1, 200), (false, 1, 1200)].into_iter());
        assert_eq!(
            (shape.decode_kv_tokens, shape.decode_max_context),
            (1500, 1200)
        );
        assert!(
            (t.pass_ms(&shape) - 14.0).abs() < 1e-9,
            "{}",
            t.pass_ms(&shape)
        );
        // Equal rows add nothing.
        let equal = PassShape::of([(false, 1, 500); 3].into_iter());
        assert!((t.pass_ms(&equal) - 13.3).abs() < 1e-9);
    }

    #[test]
    fn the_parts_of_a_price_add_up_to_it() {
        let mut shape = PassShape::of([(false, 1, 100), (false, 1, 900)].into_iter());
        shape.add_chunk(500, 200);
        // Without named families the non-attention operators are one part.
        let t = ops();
        let names = t.part_names();
        assert_eq!(
            names,
            [
                "non_attention",
                "prefill_attention",
                "decode_attention",
                "decode_spread",
                "mixed_decode_attention"
            ]
        );
        let mut parts = vec![0.0; names.len()];
        t.add_parts(&shape, None, &mut parts);
        // 502 tokens: 60.2; chunk 5.2; decodes 2 at mean 500: 1 + 1 = 2; longest 900 over the
        // mean: 0.4; decode rows of a mixed pass priced as decodes (factor 1).
        let want = [60.2, 5.2, 2.0, 0.4, 0.0];
        for (got, want) in parts.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{parts:?}");
        }
        assert!((parts.iter().sum::<f64>() - t.pass_ms(&shape)).abs() < 1e-9);
        // Named families split the non-attention part: gemm 8 + 0.08 T, elementwise 2 + 0.02 T
        // (they sum to the table's 10 + 0.1 T).
        let mut tables = op_tables();
        tables.non_attention_parts = [
            ("gemm".to_string(), vec![8.0, 88.0]),
            ("elementwise".to_string(), vec![2.0, 22.0]),
        ]
        .into();
        let t = StepTimer::new(TimingConfig::OpTables(tables), 1);
        assert_eq!(t.part_names()[..2], ["elementwise", "gemm"]);
        let mut parts = vec![0.0; 6];
        t.add_parts(&shape, None, &mut parts);
        assert!((parts[0] - (2.0 + 0.02 * 502.0)).abs() < 1e-9);
        assert!((parts[1] - (8.0 + 0.08 * 502.0)).abs() < 1e-9);
        assert!((parts.iter().sum::<f64>() - t.pass_ms(&shape)).abs() < 1e-9);
    }

    /// A pass with a chunk of 500 after 200 and two decodes at context 500: 67.4 ms with the
    /// decodes priced as in a decode pass (see `operator_tables_price_a_pass_as_one`).
    fn mixed() -> PassShape {
        let mut shape = PassShape::of([(false, 1, 500), (false, 1, 500)].into_iter());
        shape.add_chunk(500, 200);
        shape
    }

    #[test]
    fn decode_rows_of_a_mixed_pass_cost_the_factor_or_the_measured_table() {
        // Factor 2: the decodes' 2.0 ms of attention cost 4.0.
        let mut tables = op_tables();
        tables.mixed_decode_factor = 2.0;
        let t = StepTimer::new(TimingConfig::OpTables(tables.clone()), 1);
        assert!((t.pass_ms(&mixed()) - 69.4).abs() < 1e-9);
        // A pass of decodes alone is not mixed: 13.3 as before.
        let decode = PassShape::of([(false, 1, 500); 3].into_iter());
        assert!((t.pass_ms(&decode) - 13.3).abs() < 1e-9);
        // A measured table replaces the factor: 5 ms for the decode rows, 3 over their price.
        tables.mixed_decode_attention = Some(crate::config::MixedDecodeAttention {
            batch: vec![1.0],
            context: vec![0.0],
            prefill_tokens: vec![0.0],
            ms: vec![vec![vec![5.0]]],
        });
        let t = StepTimer::new(TimingConfig::OpTables(tables), 1);
        assert!((t.pass_ms(&mixed()) - 70.4).abs() < 1e-9);
        let mut parts = vec![0.0; t.part_names().len()];
        t.add_parts(&mixed(), None, &mut parts);
        assert_eq!(t.part_names().last().unwrap(), "mixed_decode_attention");
        assert!((parts.last().unwrap() - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_pass_runs_its_operators_at_the_captured_graph_size() {
        // Graphs for 1, 2, 4, 8, 16 tokens: 3 decodes run as 4 tokens, 10.4 ms of operators
        // (10 + 0.1 x 4) plus 3.0 of attention; 20 tokens fit no graph and run as 20.
        let t = ops().with_graph_sizes(vec![1, 2, 4, 8, 16]);
        let decode = PassShape::of([(false, 1, 500); 3].into_iter());
        assert!((t.pass_ms(&decode) - 13.4).abs() < 1e-9);
        let names = t.part_names();
        assert_eq!(names[..2], ["non_attention", "graph_padding"]);
        let mut parts = vec![0.0; names.len()];
        t.add_parts(&decode, None, &mut parts);
        assert!((parts[0] - 10.3).abs() < 1e-9 && (parts[1] - 0.1).abs() < 1e-9);
        let mut prefill = PassShape::default();
        prefill.add_chunk(20, 0);
        // 10 + 2 of operators, 20 x 0.01 = 0.2 of attention (one chunk: its own work).
        assert!((t.pass_ms(&prefill) - 12.2).abs() < 1e-9);
    }

    #[test]
    fn a_grouped_pass_runs_its_moe_layers_on_every_ranks_tokens() {
        // Non-attention 10 + 0.1 T split into gemm and moe halves. Rank 0 prefills 100 tokens
        // while rank 1 has no work (a one-token dummy pass): no graphs, so the MoE layers run
        // on 101 tokens, 50.5 a rank. Rank 0: gemm at 100 (10) + moe at 50.5 (5 + 2.525) +
        // chunk attention 1.0 = 18.525; the tables alone (the other rank as busy) give 21.
        let mut tables = op_tables();
        tables.non_attention_parts = [
            ("gemm".to_string(), vec![5.0, 55.0]),
            ("moe".to_string(), vec![5.0, 55.0]),
        ]
        .into();
        let t = StepTimer::new(TimingConfig::OpTables(tables), 1);
        let mut prefill = PassShape::default();
        prefill.add_chunk(100, 0);
        let lockstep = t.lockstep(&[100, 0]);
        assert_eq!(lockstep.moe_tokens_per_rank, 50.5);
        assert!((t.pass_ms(&prefill) - 21.0).abs() < 1e-9);
        assert!((t.pass_ms_in(&prefill, Some(&lockstep)) - 18.525).abs() < 1e-9);
        let names = t.part_names();
        assert_eq!(names[..3], ["gemm", "moe", "moe_other_ranks"]);
        let mut parts = vec![0.0; names.len()];
        t.add_parts(&prefill, Some(&lockstep), &mut parts);
        assert!((parts[2] + 2.475).abs() < 1e-9, "{parts:?}");
        assert!((parts.iter().sum::<f64>() - 18.525).abs() < 1e-9);
    }

    proptest::proptest! {
        /// The price of passes of decodes only, the model matched once, is `pass_ms` bit for
        /// bit, on every model.
        #[test]
        fn decode_price_is_the_pass_price(
            ratios in (1e-6f64..1e6, 1e-6f64..1e6),
            decode_ms in 0.0f64..1e3,
            capacity in 1u64..1 << 40,
            requests in 1u32..1024,
            kv in 0u64..1 << 42,
            longest in 0u32..1 << 20,
        ) {
            let timers = [
                poly(ratios.0, ratios.1),
                StepTimer::new(TimingConfig::Polynomial(PolynomialTiming {
                    speedup_ratio: ratios.0,
                    decode_speedup_ratio: ratios.1,
                }), capacity),
                StepTimer::new(TimingConfig::Fixed(FixedTiming { prefill_ms: 1.0, decode_ms }), 1),
                ops(),
            ];
            let shape = PassShape {
                decode_requests: requests,
                decode_kv_tokens: kv,
                decode_max_context: longest,
                ..PassShape::default()
            };
            for t in &timers {
                let price = match t.decode_price(&shape) {
                    DecodePrice::Constant(ms) => ms,
                    DecodePrice::Polynomial(p) => p.ms(&shape),
                    DecodePrice::Model(m) => m.pass_ms(&shape),
                };
                proptest::prop_assert_eq!(price.to_bits(), t.pass_ms(&shape).to_bits());
            }
        }
    }
}
