//! GPU step time of one forward pass (SPEC section 4).

use crate::config::TimingConfig;

/// What one pass computes, as the timing models see it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PassShape {
    /// Uncached prompt tokens computed in the pass.
    pub prefill_tokens: u64,
    /// Requests decoding one token in the pass.
    pub decode_requests: u32,
    /// KV tokens the decoding requests attend over (their context lengths, this token included).
    pub decode_kv_tokens: u64,
}

/// A step-time model bound to one worker's cache size.
#[derive(Debug, Clone)]
pub struct StepTimer {
    config: TimingConfig,
    /// Tokens the whole KV cache holds (`num_gpu_blocks * block_size`).
    kv_capacity_tokens: f64,
}

impl StepTimer {
    pub fn new(config: TimingConfig, kv_capacity_tokens: u64) -> Self {
        StepTimer {
            config,
            kv_capacity_tokens: kv_capacity_tokens as f64,
        }
    }

    /// Duration of a pass (ms): prefill cost if it prefills anything, plus decode cost if it
    /// decodes anything. A pass whose prompts were all cached and that decodes nothing costs 0.
    pub fn pass_ms(&self, shape: &PassShape) -> f64 {
        let prefill = if shape.prefill_tokens > 0 {
            self.prefill_ms(shape.prefill_tokens)
        } else {
            0.0
        };
        let decode = if shape.decode_requests > 0 {
            self.decode_ms(shape.decode_kv_tokens)
        } else {
            0.0
        };
        prefill + decode
    }

    fn prefill_ms(&self, tokens: u64) -> f64 {
        match &self.config {
            TimingConfig::Polynomial(p) => {
                let t = tokens as f64;
                (4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142) / p.speedup_ratio
            }
            TimingConfig::Fixed(f) => f.prefill_ms,
        }
    }

    fn decode_ms(&self, kv_tokens: u64) -> f64 {
        match &self.config {
            TimingConfig::Polynomial(p) => {
                let load = (kv_tokens as f64 / self.kv_capacity_tokens).min(1.0);
                let ms = (-25.74 * load * load + 54.01 * load + 5.74).max(1.0);
                ms / (p.speedup_ratio * p.decode_speedup_ratio)
            }
            TimingConfig::Fixed(f) => f.decode_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FixedTiming, PolynomialTiming};

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
    fn eight_token_prefill_matches_the_spec() {
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
            decode_requests: 2,
            decode_kv_tokens: 40,
        };
        assert_eq!(t.pass_ms(&mixed), 13.0);
        assert_eq!(t.pass_ms(&PassShape::default()), 0.0);
    }
}
