//! Which GPU step-time model a role uses, and its parameters.

use serde::{Deserialize, Serialize};

use super::{at_least_one, positive, Result, SimError};

/// Dynamo mocker's uncalibrated step-time polynomial:
/// prefill_ms(T) = 4.209989e-7 T^2 + 1.518344e-2 T + 16.50142 over T uncached prompt tokens,
/// decode_ms = max(1, -25.74 p^2 + 54.01 p + 5.74) at KV load p (share of the cache in use).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolynomialTiming {
    /// Divides every step time.
    pub speedup_ratio: f64,
    /// Divides decode step times on top of `speedup_ratio`.
    pub decode_speedup_ratio: f64,
}

impl Default for PolynomialTiming {
    fn default() -> Self {
        PolynomialTiming {
            speedup_ratio: 1.0,
            decode_speedup_ratio: 1.0,
        }
    }
}

/// Constant step times, for hand-checkable cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedTiming {
    /// Cost of a pass that prefills at least one uncached token (ms).
    pub prefill_ms: f64,
    /// Cost of a pass that decodes at least one request (ms).
    pub decode_ms: f64,
}

/// Measured step times on grids (from a profile or AIConfigurator), interpolated bilinearly
/// and extrapolated linearly past the edges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableTiming {
    /// Axis: uncached prompt tokens prefilled in one pass, strictly increasing.
    pub prefill_tokens: Vec<f64>,
    /// Axis: requests prefilling in that pass, strictly increasing.
    pub prefill_batch: Vec<f64>,
    /// Pass latency (ms), `[tokens][batch]`.
    pub prefill_ms: Vec<Vec<f64>>,
    /// Axis: requests decoding in one pass, strictly increasing.
    pub decode_batch: Vec<f64>,
    /// Axis: mean KV tokens per decoding request (this step's token included).
    pub decode_context: Vec<f64>,
    /// Step latency (ms), `[batch][context]`.
    pub decode_ms: Vec<Vec<f64>>,
}

/// The serving engine whose measured kernels AIConfigurator prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Trtllm,
    Vllm,
    Sglang,
}

/// Step times from AIConfigurator's performance database. The simulator itself reads tables
/// only: the Python layer builds this section's tables (once, cached on disk) and hands the
/// replay a `table` section in its place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AicTiming {
    /// AIConfigurator model name, e.g. `Qwen/Qwen3-32B`.
    pub model_name: String,
    /// AIConfigurator system name, e.g. `h200_sxm`.
    pub system: String,
    #[serde(default = "AicTiming::default_backend")]
    pub backend: Backend,
    /// Version of the backend in AIC's database; unset: AIC's current one for the system.
    #[serde(default)]
    pub backend_version: Option<String>,
    /// Tensor-parallel GPUs of one rank: must equal the timed engine's `tensor_parallel_size`.
    #[serde(default = "AicTiming::default_tp")]
    pub tp: u32,
}

impl AicTiming {
    fn default_backend() -> Backend {
        Backend::Trtllm
    }

    fn default_tp() -> u32 {
        1
    }

    /// The fields a section may leave out, with their values, as JSON.
    pub fn defaults_json() -> serde_json::Value {
        serde_json::json!({
            "backend": Self::default_backend(),
            "backend_version": null,
            "tp": Self::default_tp(),
        })
    }
}

/// The GPU step-time model of a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum TimingConfig {
    Polynomial(PolynomialTiming),
    Fixed(FixedTiming),
    Table(TableTiming),
    Aic(AicTiming),
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig::Polynomial(PolynomialTiming::default())
    }
}

impl TableTiming {
    fn validate(&self, section: &str) -> Result<()> {
        for (name, axis) in [
            ("prefill_tokens", &self.prefill_tokens),
            ("prefill_batch", &self.prefill_batch),
            ("decode_batch", &self.decode_batch),
            ("decode_context", &self.decode_context),
        ] {
            let field = format!("{section}.{name}");
            if axis.is_empty() {
                return Err(SimError::config(&field, "needs at least one point"));
            }
            for (i, &v) in axis.iter().enumerate() {
                if !v.is_finite() || v < 0.0 {
                    return Err(SimError::config(
                        &format!("{field}[{i}]"),
                        format!("must be finite and >= 0, got {v}"),
                    ));
                }
                if i > 0 && v <= axis[i - 1] {
                    return Err(SimError::config(
                        &format!("{field}[{i}]"),
                        format!(
                            "axis must be strictly increasing, got {v} after {}",
                            axis[i - 1]
                        ),
                    ));
                }
            }
        }
        for (name, grid, rows, cols) in [
            (
                "prefill_ms",
                &self.prefill_ms,
                &self.prefill_tokens,
                &self.prefill_batch,
            ),
            (
                "decode_ms",
                &self.decode_ms,
                &self.decode_batch,
                &self.decode_context,
            ),
        ] {
            let field = format!("{section}.{name}");
            if grid.len() != rows.len() {
                return Err(SimError::config(
                    &field,
                    format!(
                        "needs {} rows (one per axis point), got {}",
                        rows.len(),
                        grid.len()
                    ),
                ));
            }
            for (i, row) in grid.iter().enumerate() {
                if row.len() != cols.len() {
                    return Err(SimError::config(
                        &format!("{field}[{i}]"),
                        format!("needs {} values, got {}", cols.len(), row.len()),
                    ));
                }
                if let Some((j, v)) = row
                    .iter()
                    .enumerate()
                    .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
                {
                    return Err(SimError::config(
                        &format!("{field}[{i}][{j}]"),
                        format!("must be a finite latency >= 0 ms, got {v}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl AicTiming {
    fn validate(&self, section: &str) -> Result<()> {
        for (name, value) in [("model_name", &self.model_name), ("system", &self.system)] {
            if value.trim().is_empty() {
                return Err(SimError::config(
                    &format!("{section}.{name}"),
                    "must name an AIConfigurator entry, got an empty string",
                ));
            }
        }
        at_least_one(&format!("{section}.tp"), self.tp)
    }
}

/// Check the timing section at dotted path `section`.
pub(super) fn validate_timing(section: &str, t: &TimingConfig) -> Result<()> {
    match t {
        TimingConfig::Polynomial(p) => {
            positive(&format!("{section}.speedup_ratio"), p.speedup_ratio)?;
            positive(
                &format!("{section}.decode_speedup_ratio"),
                p.decode_speedup_ratio,
            )
        }
        TimingConfig::Fixed(f) => {
            positive(&format!("{section}.prefill_ms"), f.prefill_ms)?;
            positive(&format!("{section}.decode_ms"), f.decode_ms)
        }
        TimingConfig::Table(t) => t.validate(section),
        TimingConfig::Aic(a) => a.validate(section),
    }
}
