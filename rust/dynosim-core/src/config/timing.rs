//! Which GPU step-time model a role uses, and its parameters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::limits::{
    count, positive_at_most, positive_within, MAX_PARALLEL, MAX_RATIO, MAX_STEP_MS, MIN_RATIO,
};
use super::{Backend, Result, SimError};

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

/// Step times assembled from operator groups, as AIConfigurator prices a pass that mixes prefill
/// chunks and decodes: every operator but attention over all the tokens of the pass, the
/// attention of the prefill chunks (over the context each chunk follows), and the attention of
/// the decodes. Each table is interpolated multilinearly and extrapolated linearly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpTables {
    /// Axis: tokens a pass computes (prefill chunk tokens plus one per decoding request).
    pub tokens: Vec<f64>,
    /// Every operator but attention (GEMMs, MoE, norms, communication) over `tokens` (ms).
    pub non_attention_ms: Vec<f64>,
    /// `non_attention_ms` split by family of operations (e.g. `gemm`, `moe`, `communication`,
    /// `elementwise`), each over `tokens` (ms) and together summing to it: only what a replay's
    /// explanation shows (empty: one `non_attention` part).
    #[serde(default)]
    pub non_attention_parts: BTreeMap<String, Vec<f64>>,
    /// Axes of prefill attention: chunks in the pass, mean new tokens per chunk, and mean
    /// earlier tokens per chunk (a cached prefix or earlier chunks of the same prompt).
    pub chunk_batch: Vec<f64>,
    pub chunk_tokens: Vec<f64>,
    pub chunk_prefix: Vec<f64>,
    /// Prefill attention of `chunk_batch` equal chunks (ms), `[batch][tokens][prefix]`.
    pub context_attention_ms: Vec<Vec<Vec<f64>>>,
    /// Axes of decode attention: requests decoding, and their mean context (this step's token
    /// included).
    pub decode_batch: Vec<f64>,
    pub decode_context: Vec<f64>,
    /// Decode attention (ms), `[batch][context]`.
    pub decode_attention_ms: Vec<Vec<f64>>,
    /// Decode rows in a pass that also prefills cost this many times their attention in a pass
    /// of decodes only (an engine whose attention kernel runs them with the prefill rows loses
    /// the decode kernel's sharing of a KV head among its query heads). 1: priced as decodes.
    #[serde(default = "OpTables::one")]
    pub mixed_decode_factor: f64,
    /// Measured instead of the factor: the attention of the decode rows in a mixed pass.
    #[serde(default)]
    pub mixed_decode_attention: Option<MixedDecodeAttention>,
}

/// The attention of the decode rows of a pass that also prefills (ms), over the decode rows,
/// their mean context (this step's token included) and the pass's prefill tokens, interpolated
/// multilinearly and extrapolated linearly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixedDecodeAttention {
    pub batch: Vec<f64>,
    pub context: Vec<f64>,
    pub prefill_tokens: Vec<f64>,
    /// `[batch][context][prefill_tokens]` (ms).
    pub ms: Vec<Vec<Vec<f64>>>,
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
    /// The serving engine whose measurements price the passes; unset: the timed engine's
    /// `backend` (set, it must be that one).
    #[serde(default)]
    pub backend: Option<Backend>,
    /// Version of the backend in AIC's database; unset: AIC's current one for the system.
    #[serde(default)]
    pub backend_version: Option<String>,
    /// Tensor-parallel GPUs of one rank: must equal the timed engine's `tensor_parallel_size`.
    #[serde(default = "AicTiming::one")]
    pub tp: u32,
    /// Data-parallel ranks of one worker: must equal the timed engine's `data_parallel_size`.
    /// For a mixture-of-experts model they are attention-DP ranks sharing the expert layers.
    #[serde(default = "AicTiming::one")]
    pub dp: u32,
    /// Expert-parallel GPUs (mixture-of-experts models): the worker's tp x dp GPUs split the
    /// experts `ep` ways, each expert over tp x dp / ep GPUs.
    #[serde(default = "AicTiming::one")]
    pub ep: u32,
    /// A profile (.npz) of the attention of decode rows in passes that also prefill, measured
    /// on the system's GPU: it prices them instead of the backend's rule (read by the layer
    /// that builds the tables).
    #[serde(default)]
    pub mixed_decode_profile: Option<String>,
}

impl AicTiming {
    fn one() -> u32 {
        1
    }

    /// The fields a section may leave out, with their values, as JSON.
    pub fn defaults_json() -> serde_json::Value {
        serde_json::json!({
            "backend": null,
            "backend_version": null,
            "tp": Self::one(),
            "dp": Self::one(),
            "ep": Self::one(),
            "mixed_decode_profile": null,
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
    OpTables(OpTables),
    Aic(AicTiming),
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig::Polynomial(PolynomialTiming::default())
    }
}

/// Check that each named axis is non-empty, finite, >= 0 and strictly increasing.
fn validate_axes(section: &str, axes: &[(&str, &[f64])]) -> Result<()> {
    for &(name, axis) in axes {
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
    Ok(())
}

/// Check that `values` (at dotted path `field`) has `len` entries, each a latency from 0 to
/// `MAX_STEP_MS`.
fn validate_latencies(field: &str, values: &[f64], len: usize) -> Result<()> {
    if values.len() != len {
        return Err(SimError::config(
            field,
            format!(
                "needs {len} values (one per axis point), got {}",
                values.len()
            ),
        ));
    }
    match values
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && (0.0..=MAX_STEP_MS).contains(*v)))
    {
        Some((j, v)) => Err(SimError::config(
            &format!("{field}[{j}]"),
            format!("must be a finite latency from 0 to {MAX_STEP_MS:e} ms, got {v}"),
        )),
        None => Ok(()),
    }
}

/// Check a grid of rows `[i][j]` over axes of `rows` and `cols` points.
fn validate_grid(field: &str, grid: &[Vec<f64>], rows: usize, cols: usize) -> Result<()> {
    if grid.len() != rows {
        return Err(SimError::config(
            field,
            format!("needs {rows} rows (one per axis point), got {}", grid.len()),
        ));
    }
    for (i, row) in grid.iter().enumerate() {
        validate_latencies(&format!("{field}[{i}]"), row, cols)?;
    }
    Ok(())
}

impl TableTiming {
    fn validate(&self, section: &str) -> Result<()> {
        validate_axes(
            section,
            &[
                ("prefill_tokens", &self.prefill_tokens),
                ("prefill_batch", &self.prefill_batch),
                ("decode_batch", &self.decode_batch),
                ("decode_context", &self.decode_context),
            ],
        )?;
        validate_grid(
            &format!("{section}.prefill_ms"),
            &self.prefill_ms,
            self.prefill_tokens.len(),
            self.prefill_batch.len(),
        )?;
        validate_grid(
            &format!("{section}.decode_ms"),
            &self.decode_ms,
            self.decode_batch.len(),
            self.decode_context.len(),
        )
    }
}

impl OpTables {
    fn validate(&self, section: &str) -> Result<()> {
        validate_axes(
            section,
            &[
                ("tokens", &self.tokens),
                ("chunk_batch", &self.chunk_batch),
                ("chunk_tokens", &self.chunk_tokens),
                ("chunk_prefix", &self.chunk_prefix),
                ("decode_batch", &self.decode_batch),
                ("decode_context", &self.decode_context),
            ],
        )?;
        validate_latencies(
            &format!("{section}.non_attention_ms"),
            &self.non_attention_ms,
            self.tokens.len(),
        )?;
        self.validate_parts(section)?;
        let field = format!("{section}.context_attention_ms");
        if self.context_attention_ms.len() != self.chunk_batch.len() {
            return Err(SimError::config(
                &field,
                format!(
                    "needs {} planes (one per chunk_batch point), got {}",
                    self.chunk_batch.len(),
                    self.context_attention_ms.len()
                ),
            ));
        }
        for (i, plane) in self.context_attention_ms.iter().enumerate() {
            validate_grid(
                &format!("{field}[{i}]"),
                plane,
                self.chunk_tokens.len(),
                self.chunk_prefix.len(),
            )?;
        }
        validate_grid(
            &format!("{section}.decode_attention_ms"),
            &self.decode_attention_ms,
            self.decode_batch.len(),
            self.decode_context.len(),
        )?;
        positive_within(
            &format!("{section}.mixed_decode_factor"),
            self.mixed_decode_factor,
            MIN_RATIO,
            MAX_RATIO,
        )?;
        match &self.mixed_decode_attention {
            Some(m) => m.validate(&format!("{section}.mixed_decode_attention")),
            None => Ok(()),
        }
    }

    fn one() -> f64 {
        1.0
    }

    /// Each part is a latency per `tokens` point, and at every point they sum to
    /// `non_attention_ms` (within 1e-6 relative: they come from the same measurements).
    fn validate_parts(&self, section: &str) -> Result<()> {
        if self.non_attention_parts.is_empty() {
            return Ok(());
        }
        let mut sums = vec![0.0; self.tokens.len()];
        for (name, values) in &self.non_attention_parts {
            let field = format!("{section}.non_attention_parts.{name}");
            let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
            if name.is_empty() || !name.bytes().all(allowed) {
                return Err(SimError::config(
                    &field,
                    "a part's name is lowercase letters, digits and underscores".to_string(),
                ));
            }
            validate_latencies(&field, values, self.tokens.len())?;
            for (sum, v) in sums.iter_mut().zip(values) {
                *sum += v;
            }
        }
        for (i, (&sum, &total)) in sums.iter().zip(&self.non_attention_ms).enumerate() {
            if (sum - total).abs() > 1e-6 * total.abs().max(1e-3) {
                return Err(SimError::config(
                    &format!("{section}.non_attention_parts"),
                    format!(
                        "the parts sum to {sum} ms at tokens[{i}] = {}, but non_attention_ms \
                         there is {total}",
                        self.tokens[i]
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl MixedDecodeAttention {
    fn validate(&self, section: &str) -> Result<()> {
        validate_axes(
            section,
            &[
                ("batch", &self.batch),
                ("context", &self.context),
                ("prefill_tokens", &self.prefill_tokens),
            ],
        )?;
        let field = format!("{section}.ms");
        if self.ms.len() != self.batch.len() {
            return Err(SimError::config(
                &field,
                format!(
                    "needs {} planes (one per batch point), got {}",
                    self.batch.len(),
                    self.ms.len()
                ),
            ));
        }
        for (i, plane) in self.ms.iter().enumerate() {
            validate_grid(
                &format!("{field}[{i}]"),
                plane,
                self.context.len(),
                self.prefill_tokens.len(),
            )?;
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
        for (name, value) in [("tp", self.tp), ("dp", self.dp), ("ep", self.ep)] {
            count(&format!("{section}.{name}"), value, MAX_PARALLEL)?;
        }
        let gpus = u64::from(self.tp) * u64::from(self.dp);
        if gpus % u64::from(self.ep) != 0 {
            return Err(SimError::config(
                &format!("{section}.ep"),
                format!(
                    "must divide the worker's tp x dp = {gpus} GPUs (each expert spans \
                     tp x dp / ep of them), got {}",
                    self.ep
                ),
            ));
        }
        Ok(())
    }
}

/// Check the timing section at dotted path `section`.
pub(super) fn validate_timing(section: &str, t: &TimingConfig) -> Result<()> {
    match t {
        TimingConfig::Polynomial(p) => {
            for (name, value) in [
                ("speedup_ratio", p.speedup_ratio),
                ("decode_speedup_ratio", p.decode_speedup_ratio),
            ] {
                let field = format!("{section}.{name}");
                positive_within(&field, value, MIN_RATIO, MAX_RATIO)?;
            }
            Ok(())
        }
        TimingConfig::Fixed(f) => {
            positive_at_most(&format!("{section}.prefill_ms"), f.prefill_ms, MAX_STEP_MS)?;
            positive_at_most(&format!("{section}.decode_ms"), f.decode_ms, MAX_STEP_MS)
        }
        TimingConfig::Table(t) => t.validate(section),
        TimingConfig::OpTables(t) => t.validate(section),
        TimingConfig::Aic(a) => a.validate(section),
    }
}
