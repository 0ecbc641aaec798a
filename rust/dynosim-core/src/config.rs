//! Typed simulation settings. Defaults live here and only here: the Python layer reads them
//! through `default_config_json` instead of repeating them.

use serde::{Deserialize, Serialize};

use crate::error::{Result, SimError};

/// Which running request a KV-cache shortage preempts (its blocks are released and it is
/// recomputed from the start later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptionMode {
    /// The most recently admitted running request (vLLM's behaviour).
    Lifo,
    /// The earliest admitted running request.
    Fifo,
}

/// One worker's vLLM-like engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV blocks of one worker's GPU cache.
    pub num_gpu_blocks: u32,
    /// Most requests running at once on a worker.
    pub max_num_seqs: u32,
    /// Token budget of one forward pass.
    pub max_num_batched_tokens: u32,
    /// Let a long prompt take the remaining budget in pieces across passes.
    pub enable_chunked_prefill: bool,
    pub preemption_mode: PreemptionMode,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            block_size: 64,
            num_gpu_blocks: 16384,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            enable_chunked_prefill: true,
            preemption_mode: PreemptionMode::Lifo,
        }
    }
}

/// Dynamo mocker's uncalibrated step-time polynomial (SPEC section 4).
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

/// The GPU step-time model of a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum TimingConfig {
    Polynomial(PolynomialTiming),
    Fixed(FixedTiming),
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig::Polynomial(PolynomialTiming::default())
    }
}

/// How requests are spread over workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouterMode {
    RoundRobin,
}

/// The cluster: how many aggregated workers, and how the trace is played.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    pub num_workers: u32,
    /// GPUs one worker occupies (for GPU-hours).
    pub gpus_per_worker: u32,
    /// Divides every inter-arrival gap of the trace (2.0 plays it twice as fast).
    pub arrival_speedup_ratio: f64,
    pub router: RouterMode,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            num_workers: 4,
            gpus_per_worker: 1,
            arrival_speedup_ratio: 1.0,
            router: RouterMode::RoundRobin,
        }
    }
}

/// Service-level thresholds for goodput; an unset threshold is not checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlaConfig {
    /// Time to first token limit (ms).
    pub ttft_ms: Option<f64>,
    /// Limit on a request's mean inter-token latency, i.e. its TPOT (ms).
    pub itl_ms: Option<f64>,
    /// End-to-end latency limit (ms).
    pub e2e_ms: Option<f64>,
}

/// What the report records besides per-request metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReportConfig {
    /// Interval of the time series (queue depth, running requests, KV blocks) in ms.
    pub sample_interval_ms: f64,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            sample_interval_ms: 1000.0,
        }
    }
}

/// Everything a replay needs besides the workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    pub cluster: ClusterConfig,
    pub engine: EngineConfig,
    pub timing: TimingConfig,
    pub sla: SlaConfig,
    pub report: ReportConfig,
}

fn positive(field: &str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(SimError::config(
            field,
            format!("must be a finite number > 0, got {value}"),
        ))
    }
}

fn at_least_one(field: &str, value: u32) -> Result<()> {
    if value >= 1 {
        Ok(())
    } else {
        Err(SimError::config(
            field,
            format!("must be >= 1, got {value}"),
        ))
    }
}

impl SimConfig {
    /// Parse a JSON document; missing fields take their defaults, unknown ones are errors.
    pub fn from_json(text: &str) -> Result<Self> {
        let config: SimConfig =
            serde_json::from_str(text).map_err(|e| SimError::ConfigFormat(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration as canonical JSON (field order fixed by the struct definitions).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("configuration serialises")
    }

    /// Check every value range; the error names the dotted field path and the value.
    pub fn validate(&self) -> Result<()> {
        let c = &self.cluster;
        at_least_one("cluster.num_workers", c.num_workers)?;
        at_least_one("cluster.gpus_per_worker", c.gpus_per_worker)?;
        positive("cluster.arrival_speedup_ratio", c.arrival_speedup_ratio)?;
        let e = &self.engine;
        at_least_one("engine.block_size", e.block_size)?;
        at_least_one("engine.num_gpu_blocks", e.num_gpu_blocks)?;
        at_least_one("engine.max_num_seqs", e.max_num_seqs)?;
        at_least_one("engine.max_num_batched_tokens", e.max_num_batched_tokens)?;
        match &self.timing {
            TimingConfig::Polynomial(p) => {
                positive("timing.speedup_ratio", p.speedup_ratio)?;
                positive("timing.decode_speedup_ratio", p.decode_speedup_ratio)?;
            }
            TimingConfig::Fixed(f) => {
                positive("timing.prefill_ms", f.prefill_ms)?;
                positive("timing.decode_ms", f.decode_ms)?;
            }
        }
        for (field, value) in [
            ("sla.ttft_ms", self.sla.ttft_ms),
            ("sla.itl_ms", self.sla.itl_ms),
            ("sla.e2e_ms", self.sla.e2e_ms),
        ] {
            if let Some(v) = value {
                positive(field, v)?;
            }
        }
        positive("report.sample_interval_ms", self.report.sample_interval_ms)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_document_gives_defaults() {
        assert_eq!(SimConfig::from_json("{}").unwrap(), SimConfig::default());
    }

    #[test]
    fn round_trips_through_json() {
        let config = SimConfig::default();
        assert_eq!(SimConfig::from_json(&config.to_json()).unwrap(), config);
    }

    #[test]
    fn bad_values_name_their_field() {
        let err = SimConfig::from_json(r#"{"engine": {"block_size": 0}}"#).unwrap_err();
        assert_eq!(err.to_string(), "engine.block_size: must be >= 1, got 0");
        let err = SimConfig::from_json(
            r#"{"timing": {"model": "fixed", "prefill_ms": -1, "decode_ms": 1}}"#,
        )
        .unwrap_err();
        assert!(err
            .to_string()
            .starts_with("timing.prefill_ms: must be a finite number > 0"));
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = SimConfig::from_json(r#"{"engine": {"blok_size": 3}}"#).unwrap_err();
        assert!(matches!(err, SimError::ConfigFormat(ref m) if m.contains("blok_size")));
    }
}
