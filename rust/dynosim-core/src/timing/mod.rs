//! GPU step time of one forward pass: Dynamo mocker's polynomial in the prefill tokens and the
//! decode load (KV tokens attended over the cache's capacity), fixed times, tables (prefill over
//! tokens and batch, decode over batch and context), or operator tables (AIConfigurator's
//! mixed-pass model: one pass of every operator but attention over all its tokens, plus the
//! attention of its prefill chunks and of its decodes).

mod grid;

pub use grid::Grid;

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
    context_attention: Grid<3>,
    decode_attention: Grid<2>,
}

impl Ops {
    fn new(t: OpTables) -> Self {
        let flat2 = |g: Vec<Vec<f64>>| g.into_iter().flatten().collect();
        Ops {
            non_attention: Grid::new([&t.tokens], t.non_attention_ms),
            context_attention: Grid::new(
                [&t.chunk_batch, &t.chunk_tokens, &t.chunk_prefix],
                t.context_attention_ms
                    .into_iter()
                    .flatten()
                    .flatten()
                    .collect(),
            ),
            decode_attention: Grid::new(
                [&t.decode_batch, &t.decode_context],
                flat2(t.decode_attention_ms),
            ),
        }
    }

    /// One pass: the non-attention operators over all its tokens, the chunks' attention (the
    /// table's value for that many equal chunks of the mean size after the mean prefix, scaled
    /// by the chunks' actual attention work over the equal chunks' work), the decodes'.
    fn pass_ms(&self, shape: &PassShape) -> f64 {
        let tokens = shape.prefill_tokens + u64::from(shape.decode_requests);
        if tokens == 0 {
            return 0.0;
        }
        let mut ms = self.non_attention.at([tokens as f64]);
        if shape.chunks > 0 {
            let b = f64::from(shape.chunks);
            let (n, p) = (
                shape.prefill_tokens as f64 / b,
                shape.chunk_prefix_tokens as f64 / b,
            );
            let equal = self.context_attention.at([b, n, p]);
            ms += equal * shape.chunk_attention_work / (b * attention_work(n, p));
        }
        if shape.decode_requests > 0 {
            let b = f64::from(shape.decode_requests);
            ms += self
                .decode_attention
                .at([b, shape.decode_kv_tokens as f64 / b]);
        }
        ms
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

    /// Duration of a pass (ms). Operator tables price it as one pass; the other models add a
    /// prefill cost if it prefills anything and a decode cost if it decodes anything. A pass
    /// whose prompts were all cached and that decodes nothing costs 0.
    pub fn pass_ms(&self, shape: &PassShape) -> f64 {
        if let Model::Ops(ops) = &self.model {
            return ops.pass_ms(shape);
        }
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
        prefill + decode
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
        let kv = shape.decode_kv_tokens as f64;
        match &self.model {
            Model::Polynomial(p) => {
                let load = (kv / self.kv_capacity_tokens).min(1.0);
                let ms = (-25.74 * load * load + 54.01 * load + 5.74).max(1.0);
                ms / (p.speedup_ratio * p.decode_speedup_ratio)
            }
            Model::Fixed(f) => f.decode_ms,
            Model::Table { decode, .. } => {
                let batch = f64::from(shape.decode_requests);
                decode.at([batch, kv / batch])
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
        let axis = |v: &[f64]| v.to_vec();
        let ca = |b: f64, n: f64, p: f64| b * (0.01 * n + 0.001 * p);
        let tables = OpTables {
            tokens: axis(&[0.0, 1000.0]),
            non_attention_ms: vec![10.0, 110.0],
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
        };
        StepTimer::new(TimingConfig::OpTables(tables), 1)
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
}
