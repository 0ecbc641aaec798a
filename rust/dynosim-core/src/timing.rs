//! GPU step time of one forward pass: Dynamo mocker's polynomial in the prefill tokens and the
//! decode load (KV tokens attended over the cache's capacity), fixed times, or tables (prefill
//! over tokens and batch, decode over batch and context; bilinear inside, linear past the edges).

use crate::config::{FixedTiming, PolynomialTiming, TimingConfig};

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
}

/// A value over a 2-D grid: bilinear inside, linear extrapolation past the edges (from the
/// outermost segment), constant along an axis of one point, never below 0.
#[derive(Debug, Clone)]
pub struct Grid2 {
    x: Vec<f64>,
    y: Vec<f64>,
    /// Row-major `[x][y]`.
    z: Vec<f64>,
}

/// The segment of `axis` to interpolate on for `v`, and the weight of its upper end (outside
/// [0, 1] when extrapolating).
fn segment(axis: &[f64], v: f64) -> (usize, f64) {
    if axis.len() == 1 {
        return (0, 0.0);
    }
    let i = axis.partition_point(|&a| a <= v).clamp(1, axis.len() - 1) - 1;
    (i, (v - axis[i]) / (axis[i + 1] - axis[i]))
}

impl Grid2 {
    /// A grid from axes and rows `z[i][j]` (validated by the configuration).
    pub fn new(x: &[f64], y: &[f64], z: &[Vec<f64>]) -> Self {
        Grid2 {
            x: x.to_vec(),
            y: y.to_vec(),
            z: z.iter().flatten().copied().collect(),
        }
    }

    pub fn at(&self, x: f64, y: f64) -> f64 {
        let (i, wx) = segment(&self.x, x);
        let (j, wy) = segment(&self.y, y);
        let ny = self.y.len();
        let z = |a: usize, b: usize| self.z[a * ny + b];
        let (i1, j1) = ((i + 1).min(self.x.len() - 1), (j + 1).min(ny - 1));
        let lo = z(i, j) + (z(i1, j) - z(i, j)) * wx;
        let hi = z(i, j1) + (z(i1, j1) - z(i, j1)) * wx;
        (lo + (hi - lo) * wy).max(0.0)
    }
}

#[derive(Debug, Clone)]
enum Model {
    Polynomial(PolynomialTiming),
    Fixed(FixedTiming),
    Table { prefill: Grid2, decode: Grid2 },
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
                prefill: Grid2::new(&t.prefill_tokens, &t.prefill_batch, &t.prefill_ms),
                decode: Grid2::new(&t.decode_batch, &t.decode_context, &t.decode_ms),
            },
            TimingConfig::Aic(_) => {
                unreachable!("aic timing is resolved to tables before a replay (check_replayable)")
            }
        };
        StepTimer {
            model,
            kv_capacity_tokens: kv_capacity_tokens as f64,
        }
    }

    /// Duration of a pass (ms): prefill cost if it prefills anything, plus decode cost if it
    /// decodes anything. A pass whose prompts were all cached and that decodes nothing costs 0.
    pub fn pass_ms(&self, shape: &PassShape) -> f64 {
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
            Model::Table { prefill, .. } => prefill.at(t, f64::from(shape.prefill_requests)),
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
                decode.at(batch, kv / batch)
            }
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

    fn grid() -> Grid2 {
        // z = 10 + 2x + 3y + xy on x in {0, 10}, y in {1, 3}: bilinear reproduces it exactly.
        let f = |x: f64, y: f64| 10.0 + 2.0 * x + 3.0 * y + x * y;
        Grid2::new(
            &[0.0, 10.0],
            &[1.0, 3.0],
            &[
                vec![f(0.0, 1.0), f(0.0, 3.0)],
                vec![f(10.0, 1.0), f(10.0, 3.0)],
            ],
        )
    }

    #[test]
    fn bilinear_inside_the_grid() {
        let g = grid();
        assert_eq!(g.at(0.0, 1.0), 13.0); // a corner
        assert_eq!(g.at(5.0, 2.0), 10.0 + 10.0 + 6.0 + 10.0); // the centre: 36
        assert_eq!(g.at(2.5, 1.0), 10.0 + 5.0 + 3.0 + 2.5);
    }

    #[test]
    fn linear_extrapolation_past_the_edges() {
        let g = grid();
        // x = 20 extends the x segment: z(20, 1) = 10 + 40 + 3 + 20 = 73.
        assert_eq!(g.at(20.0, 1.0), 73.0);
        // y = 5 at x = 0: 10 + 15 = 25.
        assert_eq!(g.at(0.0, 5.0), 25.0);
        // Far below the grid the line would go negative (10 - 200 + 3 - 100): latency stays 0.
        assert_eq!(g.at(-100.0, 1.0), 0.0);
    }

    #[test]
    fn single_point_axis_is_constant_along_it() {
        let g = Grid2::new(&[4.0], &[1.0, 2.0], &[vec![5.0, 7.0]]);
        assert_eq!(g.at(0.0, 1.5), 6.0);
        assert_eq!(g.at(1000.0, 2.0), 7.0);
        let one = Grid2::new(&[4.0], &[8.0], &[vec![9.5]]);
        assert_eq!(one.at(123.0, 0.5), 9.5);
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
        };
        assert_eq!(t.pass_ms(&mixed), 13.0);
        assert_eq!(t.pass_ms(&PassShape::default()), 0.0);
    }
}
