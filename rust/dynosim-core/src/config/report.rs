//! What the report measures besides per-request metrics: SLA thresholds and time series.

use serde::{Deserialize, Serialize};

use super::{positive, Result};

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

impl SlaConfig {
    pub(super) fn validate(&self) -> Result<()> {
        for (field, value) in [
            ("sla.ttft_ms", self.ttft_ms),
            ("sla.itl_ms", self.itl_ms),
            ("sla.e2e_ms", self.e2e_ms),
        ] {
            if let Some(v) = value {
                positive(field, v)?;
            }
        }
        Ok(())
    }
}

/// What the report records besides per-request metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReportConfig {
    /// Interval of the time series (queue depth, running requests, KV blocks) in ms.
    pub sample_interval_ms: f64,
    /// Keep where the time went: each rank's passes by kind with the parts of their priced
    /// time, and each request's time to first token by stage (costs memory per pass).
    pub explain: bool,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            sample_interval_ms: 1000.0,
            explain: false,
        }
    }
}
